-- 0006_intent_wave: the wave an approve intent names (rfcs/0003 rule 15),
-- -1 for the intents that name none; and the signed intent the operator
-- sent (rfcs/0007 §Signed intents), kept verbatim as the JSON of
-- {document, signature}, '' for one filed unsigned (a dashboard session,
-- --insecure-dev).
ALTER TABLE intents ADD COLUMN wave INTEGER NOT NULL DEFAULT -1;
ALTER TABLE intents ADD COLUMN signed TEXT NOT NULL DEFAULT '';

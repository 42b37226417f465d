-- 0006_intent_wave: the wave an approve intent names (rfcs/0003 rule 15);
-- -1 for the intents that name none.
ALTER TABLE intents ADD COLUMN wave INTEGER NOT NULL DEFAULT -1;

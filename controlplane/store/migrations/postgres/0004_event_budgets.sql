-- 0004_event_budgets (PostgreSQL): the occupancy of the disruption budgets
-- a decision touched (rfcs/0003 rule 5), as a JSON list of {name,
-- inFlight, limit}; 'null' when it touched none, as every earlier event
-- did.
ALTER TABLE events ADD COLUMN budgets TEXT NOT NULL DEFAULT 'null';

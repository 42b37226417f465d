-- 0020_measurement_compared: what a comparison measurement took
-- (proto.Comparison, rfcs/0003 rule 16): the JSON of the canary's and the
-- baseline's values over the comparison's window; NULL for a measurement
-- judged by its analysis's conditions.
ALTER TABLE analysis_measurements ADD COLUMN compared TEXT;

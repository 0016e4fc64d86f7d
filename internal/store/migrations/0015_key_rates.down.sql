DROP TABLE key_rates;
ALTER TABLE api_keys DROP COLUMN tokens_per_minute;

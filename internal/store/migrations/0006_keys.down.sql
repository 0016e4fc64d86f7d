DROP INDEX auth_sessions_expiry;
DROP TABLE auth_sessions;
DROP INDEX auth_nonces_expiry;
DROP TABLE auth_nonces;
DROP INDEX api_keys_owner;
DROP INDEX api_keys_hash;
DROP TABLE api_keys;

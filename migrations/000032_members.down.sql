DROP TABLE IF EXISTS member_tokens;
DROP TABLE IF EXISTS member_sessions;
DROP TABLE IF EXISTS members;

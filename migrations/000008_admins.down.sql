DROP TABLE degraded_minutes;
DROP TABLE admin_sessions;
DROP TABLE admins;

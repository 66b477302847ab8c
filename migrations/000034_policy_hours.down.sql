DROP TABLE policy_hours;

-- Before 000011 such an event had no outcome of its own: it is ignored.
UPDATE stripe_events SET outcome = 'ignored' WHERE outcome = 'customer_conflict';
ALTER TABLE stripe_events
    DROP CONSTRAINT stripe_events_outcome_check,
    ADD CONSTRAINT stripe_events_outcome_check CHECK (outcome IN
        ('processing', 'applied', 'stale', 'unknown_customer', 'ignored', 'failed'));

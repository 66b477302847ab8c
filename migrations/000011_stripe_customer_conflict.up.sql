-- customer_conflict: a completed checkout named a tenant that already has
-- another Stripe customer; the tenant kept its own (internal/billing).
ALTER TABLE stripe_events
    DROP CONSTRAINT stripe_events_outcome_check,
    ADD CONSTRAINT stripe_events_outcome_check CHECK (outcome IN
        ('processing', 'applied', 'stale', 'unknown_customer', 'ignored', 'failed', 'customer_conflict'));

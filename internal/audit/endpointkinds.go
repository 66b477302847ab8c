package audit

// KindEndpointDeleted is a tenant's webhook endpoint deleted from the
// tenants' console, the member's email as actor; its detail holds
// endpoint_id and host (the URL's host alone: a path or query may carry the
// receiver's own secret). The operators' audit page filters by it.
const KindEndpointDeleted = "webhook_endpoint_deleted"

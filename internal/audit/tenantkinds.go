package audit

// The kinds of an operator disabling or enabling a whole tenant, written
// alike by the dashboard (the actor is the admin's email) and the CLI
// (cli:<os user>). A disable's detail holds reason (possibly empty).
const (
	KindTenantDisabled = "tenant_disabled"
	KindTenantEnabled  = "tenant_enabled"
)

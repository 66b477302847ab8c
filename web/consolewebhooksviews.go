package web

// The view models of the console's webhooks page (/console/webhooks).

// ConsoleWebhooksView is the webhooks page: the tenant's endpoints, the
// form that adds one, and the secret of one just made (shown once).
type ConsoleWebhooksView struct {
	Chrome    ConsoleChrome
	Endpoints []ConsoleWebhookRow
	Form      ConsoleWebhookForm
	// Secret, when not nil, is an endpoint's signing secret just made or
	// rotated, shown this once.
	Secret *ConsoleWebhookSecret
}

// ConsoleWebhookRow is one endpoint, display-ready.
type ConsoleWebhookRow struct {
	ID, URL, Events, State, Created string
	// Enabled endpoints get a Disable button, disabled ones Enable.
	Enabled bool
}

// ConsoleWebhookForm is the form that adds an endpoint, as typed, the
// event types to tick, and why it was refused (Error).
type ConsoleWebhookForm struct {
	URL    string
	Events []ConsoleWebhookEvent
	Error  string
}

// ConsoleWebhookEvent is one event type's checkbox.
type ConsoleWebhookEvent struct {
	Name    string
	Checked bool
}

// ConsoleWebhookSecret is a signing secret shown once, with its endpoint.
type ConsoleWebhookSecret struct {
	EndpointID, URL, Value string
}

// ConsoleWebhookView is one endpoint's page: its deliveries log, the test
// send and redeliver buttons.
type ConsoleWebhookView struct {
	Chrome     ConsoleChrome
	Endpoint   ConsoleWebhookRow
	Deliveries []ConsoleDeliveryRow
	Error      string
	Secret     *ConsoleWebhookSecret
}

// ConsoleDeliveryRow is one delivery as the log lists it. Settled ones
// may be delivered again.
type ConsoleDeliveryRow struct {
	ID, Event, Status, Attempts, Code, Created string
	Settled                                    bool
}

// ConsoleWebhookRotateView is the page that asks before rotating a secret.
type ConsoleWebhookRotateView struct {
	Chrome   ConsoleChrome
	Endpoint ConsoleWebhookRow
}

// ConsoleWebhookDeleteView is the page that asks before deleting an
// endpoint with its deliveries.
type ConsoleWebhookDeleteView struct {
	Chrome   ConsoleChrome
	Endpoint ConsoleWebhookRow
}

package web

// The view models of the console's policies pages (/console/policies).

// ConsolePoliciesView is the policies page: the tenant's policies and the
// form that creates one.
type ConsolePoliciesView struct {
	Chrome   ConsoleChrome
	Policies []ConsolePolicyRow
	Form     ConsolePolicyForm
}

// ConsolePolicyRow is one policy as the page lists it, display-ready;
// Path is its edit page.
type ConsolePolicyRow struct {
	Name, Path, Limit, Window, Algorithm, Scope, FailMode, Shadow, Unit string
}

// ConsolePolicyForm is the policy form (PUT /v1/policies/{name}'s
// fields) as stored or typed. New is the list's create form (its name is
// typed; an edit form's is fixed); Error says why it was not saved and
// ErrorField which field it names ("" for none).
type ConsolePolicyForm struct {
	New                                                         bool
	Name, Limit, Window, Algorithm, Scope, FailMode, AlertAfter string
	// Unit and OnExpiry make the policy a budget of reservations: "" for
	// none and for the default ("settle"), so that a concurrency policy,
	// which takes neither, sends neither.
	Unit, OnExpiry    string
	Shadow            bool
	Error, ErrorField string
}

// ConsolePolicyEditView is a policy's edit page (Path), with its "Try it"
// and "Unlock a subject" forms when Counters (the console reaches the
// counter store).
type ConsolePolicyEditView struct {
	Chrome   ConsoleChrome
	Form     ConsolePolicyForm
	Path     string
	Counters bool
	Try      ConsoleTryForm
	Unlock   ConsoleUnlockForm
	// Overrides says the policy takes overrides (scope subject): its
	// OverrideRows and the NewOverride form, as posted, show.
	Overrides    bool
	OverrideRows []ConsoleOverrideRow
	NewOverride  ConsoleOverrideForm
}

// ConsoleOverrideRow is one override of a policy, display-ready;
// DeleteHref is its delete page.
type ConsoleOverrideRow struct {
	Pattern, Limit, Expires, DeleteHref string
}

// ConsoleOverrideForm is the form that adds or replaces an override
// (PUT …/overrides/{pattern}'s fields), as typed.
type ConsoleOverrideForm struct {
	Pattern, Limit, ExpiresAt string
	Error, ErrorField         string
}

// ConsoleOverrideDeleteView asks before deleting an override.
type ConsoleOverrideDeleteView struct {
	Chrome   ConsoleChrome
	Policy   ConsolePolicyRow
	Override ConsoleOverrideRow
}

// ConsoleTryForm is the "Try it" form as posted (Mode live or test) and,
// once tried, its Result.
type ConsoleTryForm struct {
	Subject, Cost, Mode string
	Error, ErrorField   string
	Result              *ConsoleTryResult
}

// ConsoleTryResult is what a peek check of the policy answered, and the
// RateLimit headers the API would give it ("Name: value" each).
type ConsoleTryResult struct {
	Allowed, Shadow                bool
	Limit, Remaining, Reset, Retry string
	Headers                        []string
}

// ConsoleUnlockForm is the "Unlock a subject" form as posted.
type ConsoleUnlockForm struct {
	Subject, Mode     string
	Error, ErrorField string
}

// ConsolePolicyDeleteView asks before deleting a policy.
type ConsolePolicyDeleteView struct {
	Chrome ConsoleChrome
	Policy ConsolePolicyRow
}

// policyFormField reports whether the policy form has a field named
// field, next to which its error shows.
func policyFormField(field string) bool {
	switch field {
	case "name", "limit", "window", "algorithm", "scope", "fail_mode", "alert_after", "unit":
		return true
	}
	return false
}

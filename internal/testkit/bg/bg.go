// Package bg runs a component's Run loop in the background of a test and
// stops it. Test-only.
package bg

import "context"

// Run starts run in a goroutine with a context of its own and returns the
// function that cancels that context and returns run's error.
func Run(run func(context.Context) error) (stop func() error) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx) }()
	return func() error {
		cancel()
		return <-done
	}
}

// Package web holds Tollgate's server-rendered pages: templ components
// (*.templ, with their generated *_templ.go committed) and the view models
// they render. It imports no domain package and reads no data: handlers
// build a view model and render a component.
package web

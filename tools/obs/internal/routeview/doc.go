// Package routeview reads the hub's admin JSON: the clusters its routing
// state holds (GET /debug/state) and its routing page's data (GET
// /debug/routing), and decides whether that data is ready for the browser
// test: every cluster listed and at least one session that escaped and
// then followed. The browser test only starts once the JSON says the page
// has something to show, so a page failure is never mistaken for a
// workload that produced nothing.
//
// The layouts are declared here, trimmed to the fields the test reads:
// the hub's own types are internal to its module, and a reader that
// decodes the wire form is also what catches a renamed field.
package routeview

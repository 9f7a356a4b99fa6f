// Package pagecheck drives a headless Chromium (through the DevTools
// protocol, with chromedp) over the hub's routing page and checks it
// against the page's DOM contract: #status turns live, the filter controls
// are there, every expected cluster has a card in #clusters, a row of #sessions shows a session
// that escaped and followed, and clicking it opens #session-detail with a
// followed turn. Console errors and uncaught exceptions fail the check.
// It saves a full-page screenshot before and after opening the session.
//
// It never downloads a browser: it runs the Chromium it is given, with a
// fixed set of flags and a fresh profile folder it removes afterwards.
package pagecheck

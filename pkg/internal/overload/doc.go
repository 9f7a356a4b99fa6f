// Package overload summarises an overload run (make overload): the whole
// stack driven past its measured capacity, once per arm (a set of hub
// flags), with the outcome of new and returning sessions side by side and
// every process's peak goroutines and memory. It holds the pure part, the
// rows and the report, so the command (pkg/internal/cmd/overload) only
// runs processes.
package overload

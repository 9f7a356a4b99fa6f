// Package prefill models the instance-wide prefill capacity of the mock LLM
// engine as a processor-sharing scheduler: it decides when each prefill job's
// work has been served while N jobs share one GPU, and it must not know about
// tokens, rates, time scales, the KV cache or HTTP.
//
// A job's work is its solo GPU time, the time it would take if it ran alone.
// While N jobs are active each one progresses at 1/N of real time, so four
// equal concurrent jobs each take four times their solo work, and a job that
// joins late delays the others by exactly the work it receives. The caller
// turns tokens into work (cold tokens over the cold rate plus cached tokens
// over the cached rate, divided by its time scale) before calling
// Scheduler.Do.
//
// The scheduler runs no goroutine of its own and never polls: it settles the
// remaining work of every job only when a job joins, leaves or finishes, and
// keeps one clock.Timer armed for the earliest completion. All timing goes
// through a clock.Clock, so tests drive it with clock.Fake.
package prefill

// Package calibrate runs the pylon's startup input-TPS calibration ramp
// (docs/design/statistics.md#calibration): growing batches of non-streaming requests sent straight to
// the engine until a batch no longer finishes within the step timeout. It
// installs nothing itself: every completed request is observed like tunnel
// traffic, and the observations feed the same running mean that live
// traffic feeds.
package calibrate

// Package openai holds the OpenAI wire shapes that every tier shares at its
// HTTP edge: the error body {"error":{"message","type","param","code"}}, the
// status each error class maps to, and a size-limited body reader whose
// failures are already in that shape.
//
// Domain code returns typed errors; only HTTP handlers turn them into an
// *Error with this package.
package openai

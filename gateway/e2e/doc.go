// Package e2e runs the real binaries, client -> gateway -> hub -> pylon ->
// mock engine, on loopback and drives the gateway with the official
// openai-go SDK. TestMain builds the binaries with the repository's
// workspace (set STARGATE_E2E_BIN_DIR to a directory holding prebuilt
// hub, pylon and mock-engine binaries to build only the gateway). Tests
// only; nothing here is imported.
package e2e

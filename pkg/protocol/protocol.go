package protocol

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// Version is the protocol version both ends put in every message. A hub
// rejects a handshake of another version with CodeVersion.
const Version = 1

// Paths served by the pylon on the tunnel for the hub.
const (
	// RegistrationPath is the long-lived GET on which the pylon streams one
	// Registration per line (NDJSON), a full snapshot every heartbeat and at
	// once when its state changes.
	RegistrationPath = "/_stargate/v1/registration"
	// HealthPath is probed by the hub every second over the tunnel to
	// measure RTT; the pylon forwards it to the engine's health path.
	HealthPath = "/health"
)

// MaxFrameBytes bounds a handshake frame, so a peer cannot make the other
// end allocate without limit before it is authenticated.
const MaxFrameBytes = 64 << 10

// MaxRegistrationLineBytes bounds one NDJSON registration line.
const MaxRegistrationLineBytes = 4 << 20

// MaxRegionBytes bounds Handshake.Region.
const MaxRegionBytes = 64

// Handshake is the first frame on a new connection, from pylon to hub.
type Handshake struct {
	V                 int    `json:"v"`
	InferenceServerID string `json:"inference_server_id"`
	// ClusterID is the capacity domain; empty means InferenceServerID.
	ClusterID string `json:"cluster_id,omitempty"`
	// InferenceServerURL identifies the engine behind the pylon (reported
	// to clients as x-inference-server-url).
	InferenceServerURL string `json:"inference_server_url,omitempty"`
	// AuthToken is the shared registration token, when the hub requires one.
	AuthToken string `json:"auth_token,omitempty"`
	// HeartbeatMs is the pylon's --min-update-interval-ms; the hub derives
	// its idle timeout from it.
	HeartbeatMs uint64 `json:"heartbeat_ms"`
	// Region is the pylon's --region label, for people: the hub's routing
	// page groups clusters by it. Routing never reads it (RTT is what
	// region-aware algorithms measure). Empty means not set.
	Region string `json:"region,omitempty"`
}

// Ack codes a hub sends when it refuses a handshake. Peers branch on the
// code, never on the reason text.
const (
	CodeOK           = ""
	CodeVersion      = "unsupported_version"
	CodeInvalid      = "invalid_handshake"
	CodeUnauthorized = "unauthorized"
	CodeDuplicate    = "duplicate_inference_server_id"
	CodeDraining     = "draining"
)

// HandshakeAck is the hub's answer to a Handshake.
type HandshakeAck struct {
	V        int    `json:"v"`
	Accepted bool   `json:"accepted"`
	Code     string `json:"code,omitempty"`
	Reason   string `json:"reason,omitempty"`
	// HubID names the hub replica that accepted, for the pylon's logs and
	// metrics.
	HubID string `json:"hub_id,omitempty"`
}

// Status of a model in a registration.
type Status string

// Model statuses, as in upstream Stargate's INFERENCE_SERVER_STATUS_*.
const (
	StatusActive   Status = "active"
	StatusInactive Status = "inactive"
)

// Registration is one full snapshot of a pylon: identity and every published
// model with its status and statistics. Models missing from a snapshot are
// withdrawn.
type Registration struct {
	V                 int                   `json:"v"`
	Seq               uint64                `json:"seq"`
	SentAtUnixMs      int64                 `json:"sent_at_unix_ms"`
	InferenceServerID string                `json:"inference_server_id"`
	ClusterID         string                `json:"cluster_id"`
	Models            map[string]ModelEntry `json:"models"`
}

// ModelEntry is one model's status and statistics. Stats nil makes the hub
// treat the model as inactive.
type ModelEntry struct {
	Status Status      `json:"status"`
	Stats  *ModelStats `json:"stats,omitempty"`
}

// ModelStats is what a pylon publishes per model
// (docs/design/statistics.md#fields; the numbers in comments are the field
// numbers of upstream Stargate's protobuf message, kept so the two can be
// compared field by field). Counts are live values at SentAt, rates are
// tokens per second.
type ModelStats struct {
	LastMeanInputTPS              float64           `json:"last_mean_input_tps"`                // 1: sticky running mean, 0 until 5 samples
	OutputTPS                     float64           `json:"output_tps"`                         // 2: windowed, cleared when stale
	QueueSize                     uint64            `json:"queue_size"`                         // 3: Pending + InputProcessing
	QueuedInputSize               uint64            `json:"queued_input_size"`                  // 4: their x-input-tokens
	MaxOutputTPS                  float64           `json:"max_output_tps"`                     // 5: sticky max
	KVCacheCapacityTokens         uint64            `json:"kv_cache_capacity_tokens"`           // 6
	KVCacheUsedTokens             uint64            `json:"kv_cache_used_tokens"`               // 7
	KVCacheFreeTokens             uint64            `json:"kv_cache_free_tokens"`               // 8
	NumRunningQueries             uint64            `json:"num_running_queries"`                // 9: every live request
	MaxEngineConcurrency          uint64            `json:"max_engine_concurrency"`             // 10: 0 = unknown
	TotalQueryInputSize           uint64            `json:"total_query_input_size"`             // 11
	QueueTimeEstimateMsByPriority map[uint32]uint64 `json:"queue_time_estimate_ms_by_priority"` // 12: absent = TPS invalid
	InputProcessingQueries        uint64            `json:"input_processing_queries"`           // 13
	OutputGenerationQueries       uint64            `json:"output_generation_queries"`          // 14
	StatsObservedAtUnixMs         uint64            `json:"stats_observed_at_unix_ms"`          // 15
	StatsCapabilities             []string          `json:"stats_capabilities,omitempty"`       // 16
	StatsSources                  []string          `json:"stats_sources,omitempty"`            // 17
	// MaxInputTPS is the highest input throughput the pylon has measured
	// since it started (the "generation peak"): pulsar's default rendezvous
	// weight. 0 means not known yet.
	MaxInputTPS float64 `json:"max_input_tps,omitempty"` // 18
}

// Capability and source labels (fields 16 and 17 of ModelStats).
const (
	CapabilityChunkUsage    = "request.output.chunk_usage"
	CapabilityEngineStream  = "model.throughput.engine_stream"
	CapabilityKVCacheHTTP   = "machine.kv_cache.http"
	SourceChunkUsage        = "chunk_usage"
	SourceEngineStatsStream = "engine_stats_stream"
	SourceKVCacheStats      = "kv_cache_stats"
)

// ErrFrameTooLarge is returned by ReadFrame for a frame over MaxFrameBytes.
var ErrFrameTooLarge = errors.New("protocol: frame exceeds MaxFrameBytes")

// WriteFrame writes v as one frame: a 4-byte big-endian length, then JSON.
func WriteFrame(w io.Writer, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("protocol: encoding frame: %w", err)
	}
	if len(b) > MaxFrameBytes {
		return ErrFrameTooLarge
	}
	buf := make([]byte, 4+len(b))
	binary.BigEndian.PutUint32(buf, uint32(len(b)))
	copy(buf[4:], b)
	_, err = w.Write(buf)
	return err
}

// ReadFrame reads one frame written by WriteFrame into v. It reads exactly
// the frame's bytes and no more, so the HTTP/2 preface that follows on the
// same connection stays unread (never wrap the conn in a bufio.Reader
// before the handshake is over).
func ReadFrame(r io.Reader, v any) error {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return fmt.Errorf("protocol: reading frame length: %w", err)
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if n > MaxFrameBytes {
		return ErrFrameTooLarge
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(r, b); err != nil {
		return fmt.Errorf("protocol: reading frame body: %w", err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("protocol: decoding frame: %w", err)
	}
	return nil
}

// Validate checks a handshake's required fields and version.
func (h *Handshake) Validate() (code string, err error) {
	switch {
	case h.V != Version:
		return CodeVersion, fmt.Errorf("protocol version %d, want %d", h.V, Version)
	case h.InferenceServerID == "":
		return CodeInvalid, errors.New("inference_server_id is required")
	case len(h.InferenceServerID) > 256 || len(h.ClusterID) > 256:
		return CodeInvalid, errors.New("inference_server_id and cluster_id are at most 256 bytes")
	case len(h.Region) > MaxRegionBytes:
		return CodeInvalid, fmt.Errorf("region is at most %d bytes", MaxRegionBytes)
	}
	return CodeOK, nil
}

// EffectiveClusterID is ClusterID, or InferenceServerID when it is empty.
func (h *Handshake) EffectiveClusterID() string {
	if h.ClusterID == "" {
		return h.InferenceServerID
	}
	return h.ClusterID
}

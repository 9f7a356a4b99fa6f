package obs

import (
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/pprof"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/stargate-router/stargate/pkg/cli"
)

// LogConfig selects the log encoding and threshold.
type LogConfig struct {
	Format string // json or text
	Level  string // debug, info, warn or error
}

// Register binds the log settings to --log-format/--log-level and the
// envPrefix_LOG_FORMAT/envPrefix_LOG_LEVEL environment variables.
func (c *LogConfig) Register(fs *cli.FlagSet, envPrefix string) {
	fs.String(&c.Format, "log-format", envPrefix+"LOG_FORMAT", "text", "log encoding: text or json")
	fs.String(&c.Level, "log-level", envPrefix+"LOG_LEVEL", "info", "log threshold: debug, info, warn or error")
}

// NewLogger returns a logger writing to w as configured, or an error naming
// the bad flag.
func NewLogger(w io.Writer, c LogConfig) (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(c.Level)); err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", c.Level)
	}
	opts := &slog.HandlerOptions{Level: level}
	switch strings.ToLower(c.Format) {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	default:
		return nil, fmt.Errorf("--log-format %q: want text or json", c.Format)
	}
}

// NewRegistry returns an empty registry with the Go runtime and process
// collectors, the base every binary's /metrics starts from.
func NewRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	return reg
}

// MetricsHandler serves reg in the Prometheus text format, reporting
// collection errors in the response rather than failing the scrape.
func MetricsHandler(reg *prometheus.Registry) http.Handler {
	return promhttp.HandlerFor(reg, promhttp.HandlerOpts{
		ErrorHandling:     promhttp.ContinueOnError,
		EnableOpenMetrics: false,
	})
}

// BuildInfo registers the <namespace>_build_info gauge (always 1) labelled
// with the version and Go version, so dashboards can show what runs where.
func BuildInfo(reg prometheus.Registerer, namespace, version string) {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: namespace + "_build_info",
		Help: "Always 1; labels carry the binary's version.",
	}, []string{"version"})
	g.WithLabelValues(version).Set(1)
	reg.MustRegister(g)
}

// MetricsMux is the metrics listener's routes: GET /metrics for reg and,
// with pprof, the runtime profiler (see Pprof). Every binary serves it on
// its own listener, apart from the API.
func MetricsMux(reg *prometheus.Registry, pprof bool) *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", MetricsHandler(reg))
	if pprof {
		Pprof(mux)
	}
	return mux
}

// Pprof adds the runtime profiler's handlers under /debug/pprof/ to mux.
// Binaries expose it only behind a flag and only on their metrics
// listener, which operators keep off the public network.
func Pprof(mux *http.ServeMux) {
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
}

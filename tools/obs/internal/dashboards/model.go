// Package dashboards defines stargate's Grafana dashboards as data and
// builds them with the Grafana Foundation SDK into the JSON the
// observability chart ships (charts/observability/dashboards). The JSON is
// generated, never edited: `obs gen` writes it and a test fails while the
// committed files differ from what the definitions build.
package dashboards

// Dashboard is one dashboard: its file under the chart's dashboards
// folder, its Grafana identity, its variables and its rows of panels.
type Dashboard struct {
	// File is the JSON file name, e.g. "gateway.json".
	File string
	// UID is Grafana's stable id; links and the sidecar key on it.
	UID, Title, Description string
	Tags                    []string
	// Vars are the template variables after the datasource, in order.
	Vars []Var
	Rows []Row
}

// Var is a query variable filled from label_values(Metric, Label). Every
// variable is multi-valued with an "All" of ".*", so a panel selects with
// label=~"$name" and All matches every value, the empty one included.
type Var struct {
	Name, Label string
	// Metric is the selector whose Label values fill the list; it may
	// itself filter on an earlier variable (cluster by $region).
	Metric, Field string
}

// Row is a titled group of panels.
type Row struct {
	Title  string
	Panels []Panel
}

// Kind is a panel type.
type Kind int

// The panel types the dashboards use.
const (
	TimeSeries Kind = iota
	Stat
	Text
)

// Panel is one panel. Width is in Grafana's 24-column grid (0 = 8).
type Panel struct {
	Kind               Kind
	Title, Description string
	// Unit is a Grafana unit id: reqps, s, percentunit, short, bytes, ...
	Unit    string
	Width   uint32
	Queries []Query
	// Stacked stacks the series (shares and breakdowns that add up).
	Stacked bool
	// Ratio fixes the axis to 0..1 (a percentunit share).
	Ratio bool
	// Content is the Markdown of a Text panel.
	Content string
}

// Query is one PromQL target of a panel and its legend template.
type Query struct {
	Expr, Legend string
}

// q is shorthand for a query.
func q(expr, legend string) Query { return Query{Expr: expr, Legend: legend} }

// All returns every dashboard, in the order the docs present them.
func All() []Dashboard {
	return []Dashboard{Gateway(), HubRouting(), ClusterBalance(), Sessions()}
}

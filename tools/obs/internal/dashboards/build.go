package dashboards

import (
	"encoding/json"
	"fmt"

	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/common"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/grafana/grafana-foundation-sdk/go/prometheus"
	"github.com/grafana/grafana-foundation-sdk/go/stat"
	"github.com/grafana/grafana-foundation-sdk/go/text"
	"github.com/grafana/grafana-foundation-sdk/go/timeseries"
)

// Grid sizes: panels are 8 of 24 columns wide by default (three per row)
// and 8 units high, text panels 4.
const (
	defaultWidth = 8
	panelHeight  = 8
	textHeight   = 4
)

// datasourceVar names the Prometheus datasource variable every panel and
// variable query uses, so one import works with any datasource name.
const datasourceVar = "datasource"

// datasource is the reference every query carries.
func datasource() common.DataSourceRef {
	typ, uid := "prometheus", "${"+datasourceVar+"}"
	return common.DataSourceRef{Type: &typ, Uid: &uid}
}

// newBuilder starts a classic dashboard (see Build for why classic).
func newBuilder(title string) *dashboard.DashboardBuilder { //nolint:staticcheck // SA1019: see Build
	return dashboard.NewDashboardBuilder(title) //nolint:staticcheck // SA1019: see Build
}

// JSON builds d and encodes it as the committed file holds it: indented,
// with a final newline.
func JSON(d Dashboard) ([]byte, error) {
	built, err := Build(d)
	if err != nil {
		return nil, err
	}
	out, err := json.MarshalIndent(built, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("dashboard %s: %w", d.UID, err)
	}
	return append(out, '\n'), nil
}

// Build turns a definition into the SDK's dashboard model: the classic
// JSON model (schemaVersion 42), which every Grafana and its dashboard
// sidecar import. The SDK marks it deprecated in favour of the v2 schema,
// which only Grafana 12's new dashboard API reads.
func Build(d Dashboard) (dashboard.Dashboard, error) { //nolint:staticcheck // SA1019: see above
	b := newBuilder(d.Title).
		Uid(d.UID).
		Description(d.Description).
		Tags(d.Tags).
		Editable().
		Refresh("30s").
		Time("now-1h", "now").
		Timezone(common.TimeZoneBrowser).
		Tooltip(dashboard.DashboardCursorSyncCrosshair).
		WithVariable(dashboard.NewDatasourceVariableBuilder(datasourceVar).
			Label("Datasource").
			Type("prometheus"))
	for _, v := range d.Vars {
		b.WithVariable(variable(v))
	}
	id := uint32(0)
	for _, r := range d.Rows {
		id++
		b.WithRow(dashboard.NewRowBuilder(r.Title).Id(id))
		for _, p := range r.Panels {
			id++
			pb, err := panel(id, p)
			if err != nil {
				return dashboard.Dashboard{}, fmt.Errorf("dashboard %s, row %q: %w", d.UID, r.Title, err) //nolint:staticcheck // SA1019: see Build
			}
			b.WithPanel(pb)
		}
	}
	built, err := b.Build()
	if err != nil {
		return dashboard.Dashboard{}, fmt.Errorf("dashboard %s: %w", d.UID, err) //nolint:staticcheck // SA1019: see Build
	}
	return built, nil
}

func variable(v Var) *dashboard.QueryVariableBuilder {
	query := fmt.Sprintf("label_values(%s, %s)", v.Metric, v.Field)
	return dashboard.NewQueryVariableBuilder(v.Name).
		Label(v.Label).
		Datasource(datasource()).
		Query(dashboard.StringOrMap{String: &query}).
		Definition(query).
		Refresh(dashboard.VariableRefreshOnTimeRangeChanged).
		Sort(dashboard.VariableSortAlphabeticalAsc).
		Multi(true).
		IncludeAll(true).
		AllValue(".*")
}

func panel(id uint32, p Panel) (cog.Builder[dashboard.Panel], error) {
	if p.Title == "" || (p.Description == "" && p.Kind != Text) {
		return nil, fmt.Errorf("panel %d: a title and a description are required", id)
	}
	w := p.Width
	if w == 0 {
		w = defaultWidth
	}
	switch p.Kind {
	case TimeSeries:
		b := timeseries.NewPanelBuilder().Id(id).Title(p.Title).Description(p.Description).
			Datasource(datasource()).Span(w).Height(panelHeight).Unit(unit(p.Unit)).
			FillOpacity(10).
			Legend(common.NewVizLegendOptionsBuilder().ShowLegend(true).
				DisplayMode(common.LegendDisplayModeList).Placement(common.LegendPlacementBottom)).
			Tooltip(common.NewVizTooltipOptionsBuilder().Mode(common.TooltipDisplayModeMulti).Sort(common.SortOrderDescending))
		if p.Stacked {
			b.Stacking(common.NewStackingConfigBuilder().Mode(common.StackingModeNormal)).FillOpacity(40)
		}
		if p.Ratio {
			b.Min(0).Max(1)
		}
		for i, qu := range p.Queries {
			b.WithTarget(target(i, qu))
		}
		return b, nil
	case Stat:
		b := stat.NewPanelBuilder().Id(id).Title(p.Title).Description(p.Description).
			Datasource(datasource()).Span(w).Height(panelHeight).Unit(unit(p.Unit)).
			GraphMode(common.BigValueGraphModeArea).ColorMode(common.BigValueColorModeValue).
			Orientation(common.VizOrientationAuto).
			ReduceOptions(common.NewReduceDataOptionsBuilder().Calcs([]string{"lastNotNull"}))
		if p.Ratio {
			b.Min(0).Max(1)
		}
		for i, qu := range p.Queries {
			b.WithTarget(target(i, qu))
		}
		return b, nil
	case Text:
		return text.NewPanelBuilder().Id(id).Title(p.Title).Span(w).Height(textHeight).
			Mode(text.TextModeMarkdown).Content(p.Content), nil
	}
	return nil, fmt.Errorf("panel %d %q: unknown kind %d", id, p.Title, p.Kind)
}

func unit(u string) string {
	if u == "" {
		return "short"
	}
	return u
}

// target is one Prometheus query; refIds run A, B, C ... as Grafana names
// them.
func target(i int, qu Query) *prometheus.DataqueryBuilder {
	return prometheus.NewDataqueryBuilder().
		Datasource(datasource()).
		RefId(string(rune('A' + i))).
		Expr(qu.Expr).
		LegendFormat(qu.Legend).
		Range()
}

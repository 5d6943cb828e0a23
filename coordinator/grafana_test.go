package coordinator

import (
	"encoding/json"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// registeredNames are the metric names NewMetrics and EmbeddedMetrics
// register.
func registeredNames(t *testing.T) []string {
	t.Helper()
	m := NewMetrics(nil)
	descs := make(chan *prometheus.Desc, 64)
	v := reflect.ValueOf(m).Elem()
	for i := range v.NumField() {
		f := v.Field(i)
		if !f.CanInterface() {
			f = reflect.NewAt(f.Type(), f.Addr().UnsafePointer()).Elem()
		}
		if c, ok := f.Interface().(prometheus.Collector); ok {
			c.Describe(descs)
		}
	}
	for _, c := range EmbeddedMetrics(nil) { // the binary registers them with its embedded server
		c.Describe(descs)
	}
	close(descs)
	fq := regexp.MustCompile(`fqName: "([a-z_]+)"`)
	var names []string
	for d := range descs {
		if m := fq.FindStringSubmatch(d.String()); m != nil {
			names = append(names, m[1])
		}
	}
	slices.Sort(names)
	return slices.Compact(names)
}

func TestGrafana_DashboardChartsEveryCoordinatorSeriesAndNoOther(t *testing.T) {
	raw, err := os.ReadFile("../examples/grafana/shockwave.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Title  string `json:"title"`
		Panels []struct {
			Title   string `json:"title"`
			Type    string `json:"type"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("dashboard is not valid JSON: %v", err)
	}
	registered := registeredNames(t)
	if len(registered) < 10 {
		t.Fatalf("found only %d registered metrics: %v", len(registered), registered)
	}
	used := map[string]bool{}
	series := regexp.MustCompile(`shockwave_[a-z_]+`)
	for _, p := range dash.Panels {
		if p.Type != "row" && len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			for _, name := range series.FindAllString(tg.Expr, -1) {
				base := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(name, "_bucket"), "_sum"), "_count")
				if !slices.Contains(registered, base) {
					t.Errorf("panel %q queries %s, which the coordinator does not register", p.Title, name)
				}
				used[base] = true
			}
		}
	}
	for _, name := range registered {
		if !used[name] {
			t.Errorf("no panel charts %s", name)
		}
	}
}

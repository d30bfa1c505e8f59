package observability

import (
	"bufio"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
)

const (
	dashboardFile = "../../deploy/observability/nave-dashboard.json"
	rulesFile     = "../../deploy/observability/nave-alerts.yaml"
	metricsDoc    = "../../docs/metrics.md"
	operateDoc    = "../../docs/operate.md"
)

// prometheusOwn are series Prometheus makes itself, not any binary.
var prometheusOwn = map[string]string{"up": "gauge"}

// documented reads the metric tables of docs/metrics.md: name → type.
func documented(t *testing.T) map[string]string {
	t.Helper()
	f, err := os.Open(metricsDoc)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	row := regexp.MustCompile("^\\| `([a-z_:][a-z0-9_:]*)` \\| (counter|gauge|histogram|summary) \\|")
	out := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if m := row.FindStringSubmatch(sc.Text()); m != nil {
			out[m[1]] = m[2]
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(out) < 20 {
		t.Fatalf("read only %d metrics from %s: has its table format changed?", len(out), metricsDoc)
	}
	return out
}

// series is one name an expression selects: the documented metric, its type, and the
// suffix (_bucket, _sum, _count) the name adds to a histogram or summary.
type series struct{ metric, typ, suffix string }

// resolve finds the documented metric behind a selected name.
func resolve(docs map[string]string, name string) (series, error) {
	if typ, ok := docs[name]; ok {
		return series{name, typ, ""}, nil
	}
	if typ, ok := prometheusOwn[name]; ok {
		return series{name, typ, ""}, nil
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		base, ok := strings.CutSuffix(name, suffix)
		if !ok {
			continue
		}
		switch typ := docs[base]; {
		case typ == "histogram", typ == "summary" && suffix != "_bucket":
			return series{base, typ, suffix}, nil
		case typ != "":
			return series{}, fmt.Errorf("%s: %s is a %s, which has no %s series", name, base, typ, suffix)
		}
	}
	return series{}, fmt.Errorf("%s is not documented in docs/metrics.md", name)
}

// selectorName is the metric name a vector selector selects ("" for none).
func selectorName(vs *parser.VectorSelector) string {
	if vs.Name != "" {
		return vs.Name
	}
	for _, m := range vs.LabelMatchers {
		if m.Name == model.MetricNameLabel {
			return m.Value
		}
	}
	return ""
}

// checkExpr parses expr and checks every metric it names against docs: documented, rate and
// increase only over counters and histogram or summary series, histogram_quantile only over
// histogram buckets. It returns the documented metrics it uses.
func checkExpr(docs map[string]string, expr string) ([]string, error) {
	e, err := parser.NewParser(parser.Options{}).ParseExpr(expr)
	if err != nil {
		return nil, fmt.Errorf("does not parse: %w", err)
	}
	var used []string
	var problems []string
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		switch n := n.(type) {
		case *parser.VectorSelector:
			name := selectorName(n)
			if name == "" {
				problems = append(problems, fmt.Sprintf("selector %s names no metric", n))
				return nil
			}
			s, err := resolve(docs, name)
			if err != nil {
				problems = append(problems, err.Error())
				return nil
			}
			if s.typ == "histogram" && s.suffix == "" {
				problems = append(problems, fmt.Sprintf("%s is a histogram: select its _bucket, _sum or _count series", name))
			}
			used = append(used, s.metric)
		case *parser.Call:
			for _, arg := range n.Args {
				ms, ok := arg.(*parser.MatrixSelector)
				if !ok {
					continue
				}
				name := selectorName(ms.VectorSelector.(*parser.VectorSelector))
				s, err := resolve(docs, name)
				if err != nil {
					continue // reported at the selector
				}
				switch n.Func.Name {
				case "rate", "irate", "increase":
					if s.typ == "gauge" {
						problems = append(problems, fmt.Sprintf("%s(%s): %s is a gauge", n.Func.Name, name, s.metric))
					}
				case "deriv", "delta", "idelta":
					if s.typ != "gauge" {
						problems = append(problems, fmt.Sprintf("%s(%s): %s is a %s, not a gauge", n.Func.Name, name, s.metric, s.typ))
					}
				}
			}
			if n.Func.Name == "histogram_quantile" {
				parser.Inspect(n.Args[1], func(m parser.Node, _ []parser.Node) error {
					if vs, ok := m.(*parser.VectorSelector); ok {
						if s, err := resolve(docs, selectorName(vs)); err == nil && s.suffix != "_bucket" {
							problems = append(problems, fmt.Sprintf("histogram_quantile over %s, not a histogram's _bucket series", selectorName(vs)))
						}
					}
					return nil
				})
			}
		}
		return nil
	})
	if len(problems) > 0 {
		return nil, fmt.Errorf("%s", strings.Join(problems, "; "))
	}
	return used, nil
}

// grafanaVars are the dashboard variables an expression may use, with a value that parses.
var grafanaVars = strings.NewReplacer("$__rate_interval", "5m", "$__interval", "1m", "${mesh}", "x", "$mesh", "x")

// labelValues is Grafana's label_values(SELECTOR, LABEL) variable query.
var labelValues = regexp.MustCompile(`^label_values\((.+),\s*[a-zA-Z_][a-zA-Z0-9_]*\)$`)

// panel is what the test reads of a Grafana panel.
type panel struct {
	ID      *int    `json:"id"`
	Type    string  `json:"type"`
	Title   string  `json:"title"`
	Panels  []panel `json:"panels"` // a collapsed row's
	Targets []struct {
		Expr  string `json:"expr"`
		RefID string `json:"refId"`
	} `json:"targets"`
	GridPos    *struct{ H, W, X, Y int } `json:"gridPos"`
	Datasource *struct {
		Type string `json:"type"`
		UID  string `json:"uid"`
	} `json:"datasource"`
}

type dashboard struct {
	UID        string  `json:"uid"`
	Title      string  `json:"title"`
	Panels     []panel `json:"panels"`
	Templating struct {
		List []struct {
			Name  string          `json:"name"`
			Type  string          `json:"type"`
			Query json.RawMessage `json:"query"`
		} `json:"list"`
	} `json:"templating"`
}

func TestDashboard(t *testing.T) {
	docs := documented(t)
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	dec := json.NewDecoder(strings.NewReader(string(b)))
	if err := dec.Decode(&d); err != nil {
		t.Fatalf("%s is not valid dashboard JSON: %v", dashboardFile, err)
	}
	if d.UID == "" || d.Title == "" {
		t.Errorf("the dashboard needs a uid and a title (uid %q, title %q)", d.UID, d.Title)
	}
	ids := map[int]string{}
	used := map[string]bool{}
	exprs := 0
	var walk func(ps []panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			switch {
			case p.ID == nil:
				t.Errorf("panel %q has no id", p.Title)
			case ids[*p.ID] != "":
				t.Errorf("panel id %d is used by %q and %q", *p.ID, ids[*p.ID], p.Title)
			default:
				ids[*p.ID] = p.Title
			}
			if p.GridPos == nil || p.GridPos.W <= 0 || p.GridPos.X+p.GridPos.W > 24 {
				t.Errorf("panel %q: missing gridPos or wider than the 24-column grid", p.Title)
			}
			if p.Type != "row" && len(p.Targets) == 0 {
				t.Errorf("panel %q has no query", p.Title)
			}
			// The data source is the dashboard's variable, so that the file imports anywhere.
			if p.Type != "row" && (p.Datasource == nil || p.Datasource.Type != "prometheus" || p.Datasource.UID != "${datasource}") {
				t.Errorf("panel %q: datasource %+v, want the prometheus variable ${datasource}", p.Title, p.Datasource)
			}
			refs := map[string]bool{}
			for _, tg := range p.Targets {
				if refs[tg.RefID] {
					t.Errorf("panel %q: refId %q twice", p.Title, tg.RefID)
				}
				refs[tg.RefID] = true
				exprs++
				names, err := checkExpr(docs, grafanaVars.Replace(tg.Expr))
				if err != nil {
					t.Errorf("panel %q, query %s: %v\n\t%s", p.Title, tg.RefID, err, tg.Expr)
				}
				for _, n := range names {
					used[n] = true
				}
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		var q struct {
			Query string `json:"query"`
		}
		if err := json.Unmarshal(v.Query, &q); err != nil {
			if err := json.Unmarshal(v.Query, &q.Query); err != nil {
				t.Errorf("variable %s: query is neither a string nor an object: %v", v.Name, err)
			}
		}
		m := labelValues.FindStringSubmatch(q.Query)
		if m == nil {
			t.Errorf("variable %s: query %q is not label_values(SELECTOR, LABEL)", v.Name, q.Query)
			continue
		}
		if _, err := checkExpr(docs, m[1]); err != nil {
			t.Errorf("variable %s: %v", v.Name, err)
		}
	}
	if exprs < 10 {
		t.Fatalf("found only %d queries in %d panels: has the file's format changed?", exprs, len(ids))
	}
	var unused []string
	for name := range docs {
		if !used[name] {
			unused = append(unused, name)
		}
	}
	sort.Strings(unused)
	if len(unused) > 0 {
		t.Errorf("documented metrics on no panel (add one to %s): %s", dashboardFile, strings.Join(unused, ", "))
	}
	t.Logf("%d panels, %d queries, %d of %d documented metrics shown; not shown: %s", len(ids), exprs, len(used), len(docs), strings.Join(unused, ", "))
}

// TestAlertRules loads the rules file as Prometheus does (rulefmt: the YAML, every expression,
// every label and annotation template), checks each expression's metrics against
// docs/metrics.md, and that each alert has a severity, a summary and a runbook entry in
// docs/operate.md (and each entry there an alert).
func TestAlertRules(t *testing.T) {
	docs := documented(t)
	b, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	logger := slog.New(slog.NewTextHandler(testWriter{t}, nil))
	f, errs := rulefmt.Parse(b, false, model.UTF8Validation, parser.NewParser(parser.Options{}), logger)
	for _, err := range errs {
		t.Errorf("%s: Prometheus would refuse it: %v", rulesFile, err)
	}
	if f == nil {
		t.FailNow()
	}
	runbook, err := os.ReadFile(operateDoc)
	if err != nil {
		t.Fatal(err)
	}
	headings := map[string]bool{}
	for _, line := range strings.Split(string(runbook), "\n") {
		if h, ok := strings.CutPrefix(line, "### "); ok {
			headings[strings.TrimSpace(h)] = true
		}
	}
	groups, alerts := map[string]bool{}, map[string]bool{}
	n := 0
	for _, g := range f.Groups {
		if g.Name == "" || groups[g.Name] {
			t.Errorf("group name %q is empty or repeated", g.Name)
		}
		groups[g.Name] = true
		for _, r := range g.Rules {
			n++
			name := r.Alert + r.Record
			if (r.Alert == "") == (r.Record == "") {
				t.Errorf("group %s: a rule needs exactly one of alert and record (%q, %q)", g.Name, r.Alert, r.Record)
			}
			if _, err := checkExpr(docs, r.Expr); err != nil {
				t.Errorf("rule %s: %v\n\t%s", name, err, r.Expr)
			}
			if r.Alert == "" {
				continue
			}
			if alerts[r.Alert] {
				t.Errorf("alert %s is defined twice", r.Alert)
			}
			alerts[r.Alert] = true
			switch r.Labels["severity"] {
			case "critical", "warning", "info":
			default:
				t.Errorf("alert %s: severity %q, want critical, warning or info", r.Alert, r.Labels["severity"])
			}
			if r.Annotations["summary"] == "" {
				t.Errorf("alert %s has no summary", r.Alert)
			}
			if want := "docs/operate.md#" + strings.ToLower(r.Alert); r.Annotations["runbook"] != want {
				t.Errorf("alert %s: runbook annotation %q, want %q", r.Alert, r.Annotations["runbook"], want)
			}
			if !headings[r.Alert] {
				t.Errorf("alert %s has no runbook entry: docs/operate.md needs a heading \"### %s\"", r.Alert, r.Alert)
			}
		}
	}
	for h := range headings {
		if strings.HasPrefix(h, "Nave") && !alerts[h] {
			t.Errorf("docs/operate.md explains alert %s, which %s does not define", h, filepath.Base(rulesFile))
		}
	}
	if n < 5 {
		t.Fatalf("found only %d rules: has the file's format changed?", n)
	}
	t.Logf("%d rules in %d groups", n, len(groups))
}

// testWriter logs what rulefmt logs (a warning for a second YAML document).
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Errorf("rulefmt: %s", p)
	return len(p), nil
}

// TestCheckExprRefuses shows the checks can fail: each expression breaks one rule.
func TestCheckExprRefuses(t *testing.T) {
	docs := map[string]string{"a_total": "counter", "g": "gauge", "h_seconds": "histogram"}
	for expr, want := range map[string]string{
		`rate(a_total[5m]`:                           "does not parse",
		`rate(undocumented_total[5m])`:               "not documented",
		`rate(g[5m])`:                                "is a gauge",
		`histogram_quantile(0.9, rate(a_total[5m]))`: "not a histogram's _bucket",
		`h_seconds > 1`:                              "is a histogram",
		`g_bucket`:                                   "has no _bucket",
		`{job="x"}`:                                  "names no metric",
		`delta(a_total[5m])`:                         "not a gauge",
	} {
		if _, err := checkExpr(docs, expr); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("checkExpr(%q) = %v, want an error containing %q", expr, err, want)
		}
	}
	used, err := checkExpr(docs, `histogram_quantile(0.99, sum by (le) (rate(h_seconds_bucket[5m]))) / sum(rate(h_seconds_count[5m])) + {__name__="g"} + up`)
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(used)
	if got := strings.Join(used, ","); got != "g,h_seconds,h_seconds,up" {
		t.Errorf("used = %s", got)
	}
}

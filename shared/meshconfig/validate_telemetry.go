package meshconfig

import (
	telemetryv1alpha1 "istio.io/api/telemetry/v1alpha1"
)

// validateTelemetry checks a Telemetry: how it attaches (a selector or
// targetRefs, not both), provider references, and that every field it
// sets is one nave applies (docs/telemetry.md).
func validateTelemetry(c *checker, p path, t *telemetryv1alpha1.Telemetry) {
	validateSelector(c, p.field("selector").field("matchLabels"), t.GetSelector().GetMatchLabels())
	refs := len(t.GetTargetRefs())
	if t.GetTargetRef() != nil {
		refs++
		if len(t.GetTargetRefs()) > 0 {
			c.fail(p.field("targetRef"), "targetRef and targetRefs cannot both be set")
		}
	}
	if refs > 0 && len(t.GetSelector().GetMatchLabels()) > 0 {
		c.fail(p.field("selector"), "selector and targetRefs cannot both be set")
	}
	for i, r := range t.GetTargetRefs() {
		if r.GetKind() == "" || r.GetName() == "" {
			c.fail(p.field("targetRefs").index(i), "kind and name are required")
		}
	}
	checkProviders := func(fp path, refs []*telemetryv1alpha1.ProviderRef) {
		for i, r := range refs {
			if r.GetName() == "" {
				c.fail(fp.field("providers").index(i).field("name"), "name is required")
			}
		}
	}
	for i, tr := range t.GetTracing() {
		tp := p.field("tracing").index(i)
		checkProviders(tp, tr.GetProviders())
		if v := tr.GetRandomSamplingPercentage(); v != nil {
			checkPercent(c, tp.field("randomSamplingPercentage"), v.GetValue())
		}
		if tr.GetEnableIstioTags() != nil {
			c.fail(tp.field("enableIstioTags"), "not supported: nave adds no Istio tags to spans (use customTags)")
		}
		if tr.GetDisableContextPropagation() != nil {
			c.fail(tp.field("disableContextPropagation"), "not supported: trace context is always propagated")
		}
		for _, name := range sortedMapKeys(tr.GetCustomTags()) {
			cp := tp.field("customTags").key(name)
			switch v := tr.GetCustomTags()[name].GetType().(type) {
			case *telemetryv1alpha1.Tracing_CustomTag_Literal:
				if v.Literal.GetValue() == "" {
					c.fail(cp.field("literal").field("value"), "value is required")
				}
			case *telemetryv1alpha1.Tracing_CustomTag_Environment:
				if v.Environment.GetName() == "" {
					c.fail(cp.field("environment").field("name"), "name is required")
				}
			case *telemetryv1alpha1.Tracing_CustomTag_Header:
				if v.Header.GetName() == "" {
					c.fail(cp.field("header").field("name"), "name is required")
				}
			case *telemetryv1alpha1.Tracing_CustomTag_Formatter:
				if v.Formatter.GetValue() == "" {
					c.fail(cp.field("formatter").field("value"), "value is required")
				}
			default:
				c.fail(cp, "one of literal, environment, header or formatter is required")
			}
		}
	}
	for i, m := range t.GetMetrics() {
		mp := p.field("metrics").index(i)
		checkProviders(mp, m.GetProviders())
		if m.GetReportingInterval() != nil {
			c.fail(mp.field("reportingInterval"), "not supported: TCP metrics are reported at the stats filter's default interval")
		}
		for j, o := range m.GetOverrides() {
			op := mp.field("overrides").index(j)
			if sel, ok := o.GetMatch().GetMetricMatch().(*telemetryv1alpha1.MetricSelector_CustomMetric); ok && sel.CustomMetric == "" {
				c.fail(op.field("match").field("customMetric"), "customMetric must not be empty")
			}
			for _, tag := range sortedMapKeys(o.GetTagOverrides()) {
				to := o.GetTagOverrides()[tag]
				if tag == "" {
					c.fail(op.field("tagOverrides"), "a tag name must not be empty")
				}
				if to.GetOperation() == telemetryv1alpha1.MetricsOverrides_TagOverride_UPSERT && to.GetValue() == "" {
					c.fail(op.field("tagOverrides").key(tag).field("value"), "an UPSERT needs a value")
				}
			}
		}
	}
	for i, l := range t.GetAccessLogging() {
		checkProviders(p.field("accessLogging").index(i), l.GetProviders())
	}
}

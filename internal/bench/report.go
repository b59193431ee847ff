package bench

// Markdown renders the report (placeholder until the tables are written).
func (r *Report) Markdown(chart string) string { return "" }

// SVG renders the chart.
func (r *Report) SVG() string { return "" }

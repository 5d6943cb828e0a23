package report

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	"github.com/shockwave-sched/shockwave/sim"
)

// Names of the files Plot writes.
const (
	FTFCDFFile  = "ftf_cdf.png"
	ClusterFile = "cluster.png"
	SummaryFile = "summary.png"
)

// Figure geometry. At 144 dots per inch a 18 cm wide figure is about 1000
// pixels, sharp on a laptop screen and still small as a file.
const (
	dpi         = 144
	figWidth    = 18 * vg.Centimeter
	figHeight   = 11 * vg.Centimeter
	panelHeight = 8 * vg.Centimeter
	margin      = 3 * vg.Millimeter
)

// Plot writes three PNG charts of results into dir, creating it if needed:
//
//   - ftf_cdf.png: per policy, the cumulative distribution of the
//     finish-time fairness ρ (static contention factor) over jobs, with a
//     vertical line at ρ = 1, where a job finishes exactly as late as its
//     fair share allows; a curve further left and higher is fairer;
//   - cluster.png: two panels over hours since the start, the number of
//     active jobs (arrived, not finished) and the number of busy GPUs per
//     round, one step line per policy, with the cluster size marked;
//   - summary.png: per policy, a bar for the makespan and one for the
//     average JCT, in hours, each labelled with its value.
//
// Each policy keeps one colour (and, in line charts, one dash pattern) in
// all three files; legends sit beside the axes so they never hide data.
// Titles name the jobs and GPUs. An error names the file that failed.
func Plot(dir string, results []*sim.Result) error {
	if err := check(results); err != nil {
		return err
	}
	if len(results) == 0 {
		return errNoResults
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("report: create plot directory: %w", err)
	}
	charts := []struct {
		file string
		make func([]*sim.Result) (*figure, error)
	}{
		{FTFCDFFile, ftfCDF},
		{ClusterFile, clusterTimeline},
		{SummaryFile, summaryBars},
	}
	for _, c := range charts {
		fig, err := c.make(results)
		if err == nil {
			err = fig.save(filepath.Join(dir, c.file))
		}
		if err != nil {
			return fmt.Errorf("report: %s: %w", c.file, err)
		}
	}
	return nil
}

// figure is one or more plots stacked vertically, sharing a legend drawn in
// a column to their right.
type figure struct {
	panels []*plot.Plot
	legend plot.Legend
	width  vg.Length
	height vg.Length
}

func newFigure(height vg.Length, panels ...*plot.Plot) *figure {
	lg := plot.NewLegend()
	lg.Top, lg.Left = true, true
	setFont(&lg.TextStyle, 11)
	lg.ThumbnailWidth = vg.Points(28)
	lg.Padding = vg.Points(3)
	return &figure{panels: panels, legend: lg, width: figWidth, height: height}
}

// draw renders the figure onto a canvas of its size.
func (f *figure) draw() *vgimg.Canvas {
	img := vgimg.NewWith(vgimg.UseWH(f.width, f.height), vgimg.UseDPI(dpi))
	dc := draw.Crop(draw.New(img), margin, -margin, margin, -margin)
	legendWidth := f.legend.Rectangle(dc).Size().X + 3*margin
	area := draw.Crop(dc, 0, -legendWidth, 0, 0)
	rows := make([][]*plot.Plot, len(f.panels))
	for i, p := range f.panels {
		rows[i] = []*plot.Plot{p}
	}
	tiles := draw.Tiles{Rows: len(f.panels), Cols: 1, PadY: 4 * vg.Millimeter}
	canvases := plot.Align(rows, tiles, area)
	for i, p := range f.panels {
		p.Draw(canvases[i][0])
	}
	// The legend's top lines up with the top of the first panel's axes.
	top := f.panels[0].DataCanvas(canvases[0][0]).Max.Y
	lc := draw.Crop(dc, area.Max.X-dc.Min.X+2*margin, 0, 0, 0)
	lc.Max.Y = top
	f.legend.Draw(lc)
	return img
}

// save writes the figure as a PNG file.
func (f *figure) save(path string) (err error) {
	img := f.draw()
	out, err := os.Create(path)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, out.Close()) }()
	_, err = vgimg.PngCanvas{Canvas: img}.WriteTo(out)
	return err
}

// newPanel is a plot with this package's fonts and a light grid.
func newPanel(title, xLabel, yLabel string) *plot.Plot {
	p := plot.New()
	p.Title.Text = title
	setFont(&p.Title.TextStyle, 13)
	p.Title.Padding = vg.Points(8)
	p.X.Label.Text, p.Y.Label.Text = xLabel, yLabel
	for _, ax := range []*plot.Axis{&p.X, &p.Y} {
		setFont(&ax.Label.TextStyle, 11)
		setFont(&ax.Tick.Label, 10)
		ax.Tick.Marker = niceTicks{}
	}
	g := plotter.NewGrid()
	g.Vertical.Color = gridColor
	g.Horizontal.Color = gridColor
	p.Add(g)
	return p
}

// setFont makes a text style sans-serif at size points, easier to read
// on a screen than the serif default.
func setFont(s *text.Style, size float64) {
	s.Font.Variant = "Sans"
	s.Font.Size = vg.Points(size)
}

// dashes gives each policy its own pattern next to its colour, so that
// lines stay apart in grey print and for colour-blind readers.
var dashes = [][]vg.Length{
	nil,
	{vg.Points(6), vg.Points(3)},
	{vg.Points(2), vg.Points(2)},
	{vg.Points(8), vg.Points(3), vg.Points(2), vg.Points(3)},
	{vg.Points(12), vg.Points(4)},
	{vg.Points(4), vg.Points(2), vg.Points(1), vg.Points(2), vg.Points(1), vg.Points(2)},
	{vg.Points(1), vg.Points(3)},
}

// lineStyle is the style of the i-th policy's lines.
func lineStyle(i int) draw.LineStyle {
	return draw.LineStyle{
		Color:  policyColor(i),
		Width:  vg.Points(1.6),
		Dashes: dashes[i%len(dashes)],
	}
}

package main

import (
	"encoding/csv"
	"fmt"
	"image"
	"image/color"
	"image/draw"
	"image/png"
	"math"
	"os"
	"strconv"

	"golang.org/x/image/font"
	"golang.org/x/image/font/basicfont"
	"golang.org/x/image/math/fixed"

	"github.com/reconcile/reconcile/internal/providersim"
)

// writeSeriesCSV writes the simulator's per-second series: second, calls,
// ok (2xx), throttled (429) and the limit in force.
func writeSeriesCSV(path string, series []providersim.Second) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := csv.NewWriter(f)
	_ = w.Write([]string{"second", "calls", "ok", "throttled", "limit"})
	for _, s := range series {
		_ = w.Write([]string{strconv.FormatInt(s.Second, 10), strconv.FormatInt(s.Calls, 10), strconv.FormatInt(s.OK, 10),
			strconv.FormatInt(s.Throttled, 10), strconv.FormatFloat(s.Limit, 'g', -1, 64)})
	}
	w.Flush()
	if err := w.Error(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// readSeriesCSV reads a file written by writeSeriesCSV.
func readSeriesCSV(path string) ([]providersim.Second, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	recs, err := csv.NewReader(f).ReadAll()
	if err != nil {
		return nil, err
	}
	var out []providersim.Second
	for i, r := range recs {
		if i == 0 || len(r) < 5 {
			continue
		}
		var s providersim.Second
		var errs [5]error
		s.Second, errs[0] = strconv.ParseInt(r[0], 10, 64)
		s.Calls, errs[1] = strconv.ParseInt(r[1], 10, 64)
		s.OK, errs[2] = strconv.ParseInt(r[2], 10, 64)
		s.Throttled, errs[3] = strconv.ParseInt(r[3], 10, 64)
		s.Limit, errs[4] = strconv.ParseFloat(r[4], 64)
		for _, err := range errs {
			if err != nil {
				return nil, fmt.Errorf("%s line %d: %w", path, i+1, err)
			}
		}
		out = append(out, s)
	}
	return out, nil
}

var (
	colBackground = color.RGBA{255, 255, 255, 255}
	colAxis       = color.RGBA{60, 60, 60, 255}
	colGrid       = color.RGBA{225, 225, 225, 255}
	colCalls      = color.RGBA{31, 119, 180, 255}
	colThrottled  = color.RGBA{214, 39, 40, 255}
	colLimit      = color.RGBA{40, 40, 40, 255}
	colEstimate   = color.RGBA{44, 160, 44, 255}
)

// plotSeries draws calls/s, 429s/s and the simulator's limit over time,
// and the limiter's estimate of the limit when given (estimate[i] at the
// end of second i; 0: unknown).
func plotSeries(path string, series []providersim.Second, estimate []float64, title string) error {
	const w, h = 1000, 500
	const left, right, top, bottom = 60, 20, 40, 60
	img := image.NewRGBA(image.Rect(0, 0, w, h))
	draw.Draw(img, img.Bounds(), image.NewUniform(colBackground), image.Point{}, draw.Src)

	var start, end int64
	yMax := 1.0
	if len(series) > 0 {
		start, end = series[0].Second, series[len(series)-1].Second+1
	}
	for _, s := range series {
		yMax = math.Max(yMax, math.Max(float64(s.Calls), s.Limit))
	}
	yMax = math.Ceil(yMax*1.15/5) * 5
	xMax := float64(max(end-start, 1))
	px := func(sec float64) int { return left + int(math.Round(sec/xMax*float64(w-left-right))) }
	py := func(v float64) int { return h - bottom - int(math.Round(v/yMax*float64(h-top-bottom))) }

	// Grid and axes.
	yStep := niceStep(yMax, 6)
	for v := 0.0; v <= yMax+1e-9; v += yStep {
		hline(img, left, w-right, py(v), colGrid)
		label(img, left-8-7*len(fmtNum(v)), py(v)+4, fmtNum(v), colAxis)
	}
	xStep := niceStep(xMax, 12)
	for v := 0.0; v <= xMax+1e-9; v += xStep {
		vline(img, px(v), top, h-bottom, colGrid)
		s := fmtNum(v)
		label(img, px(v)-7*len(s)/2, h-bottom+16, s, colAxis)
	}
	hline(img, left, w-right, h-bottom, colAxis)
	vline(img, left, top, h-bottom, colAxis)
	label(img, (w-7*len("seconds since start"))/2, h-bottom+36, "seconds since start", colAxis)
	label(img, 8, top-14, "per second", colAxis)
	label(img, left+(w-left-right-7*len(title))/2, 20, title, colAxis)

	// Series: the limit as steps, calls and 429s at the middle of each second.
	for i, s := range series {
		x0, x1 := px(float64(s.Second-start)), px(float64(s.Second-start+1))
		if s.Limit > 0 {
			thick(img, x0, py(s.Limit), x1, py(s.Limit), colLimit, 1)
			if i > 0 && series[i-1].Limit != s.Limit && series[i-1].Limit > 0 {
				thick(img, x0, py(series[i-1].Limit), x0, py(s.Limit), colLimit, 1)
			}
		}
	}
	polyline := func(val func(providersim.Second) float64, c color.Color) {
		for i := 1; i < len(series); i++ {
			a, b := series[i-1], series[i]
			thick(img, px(float64(a.Second-start)+0.5), py(val(a)), px(float64(b.Second-start)+0.5), py(val(b)), c, 2)
		}
	}
	polyline(func(s providersim.Second) float64 { return float64(s.Throttled) }, colThrottled)
	polyline(func(s providersim.Second) float64 { return float64(s.Calls) }, colCalls)
	for i := 1; i < len(estimate); i++ {
		if estimate[i-1] > 0 && estimate[i] > 0 {
			thick(img, px(float64(i)), py(math.Min(estimate[i-1], yMax)), px(float64(i+1)), py(math.Min(estimate[i], yMax)), colEstimate, 1)
		}
	}

	// Legend.
	lx, ly := left+16, top+8
	draw.Draw(img, image.Rect(lx-8, ly-6, lx+236, ly+76), image.NewUniform(colBackground), image.Point{}, draw.Src)
	for i, e := range []struct {
		c    color.Color
		text string
		t    int
	}{{colCalls, "calls/s reaching the provider", 2}, {colThrottled, "429s/s", 2}, {colLimit, "provider's limit", 1}, {colEstimate, "limiter's estimate", 1}} {
		y := ly + 8 + 18*i
		thick(img, lx, y, lx+24, y, e.c, e.t)
		label(img, lx+32, y+4, e.text, colAxis)
	}

	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := png.Encode(f, img); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// niceStep returns a round step (1, 2 or 5 × 10^k) giving about n ticks.
func niceStep(span float64, n int) float64 {
	raw := span / float64(n)
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*mag >= raw {
			return m * mag
		}
	}
	return 10 * mag
}

func fmtNum(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }

func label(img *image.RGBA, x, y int, s string, c color.Color) {
	d := font.Drawer{Dst: img, Src: image.NewUniform(c), Face: basicfont.Face7x13, Dot: fixed.P(x, y)}
	d.DrawString(s)
}

func hline(img *image.RGBA, x0, x1, y int, c color.Color) {
	for x := x0; x <= x1; x++ {
		img.Set(x, y, c)
	}
}

func vline(img *image.RGBA, x, y0, y1 int, c color.Color) {
	for y := y0; y <= y1; y++ {
		img.Set(x, y, c)
	}
}

// thick draws a line of width t from (x0, y0) to (x1, y1) (Bresenham with
// a square pen).
func thick(img *image.RGBA, x0, y0, x1, y1 int, c color.Color, t int) {
	dx, dy := abs(x1-x0), -abs(y1-y0)
	sx, sy := sign(x1-x0), sign(y1-y0)
	e := dx + dy
	for {
		for i := 0; i < t; i++ {
			for j := 0; j < t; j++ {
				img.Set(x0+i-t/2, y0+j-t/2, c)
			}
		}
		if x0 == x1 && y0 == y1 {
			return
		}
		e2 := 2 * e
		if e2 >= dy {
			e += dy
			x0 += sx
		}
		if e2 <= dx {
			e += dx
			y0 += sy
		}
	}
}

func abs(v int) int {
	if v < 0 {
		return -v
	}
	return v
}

func sign(v int) int {
	switch {
	case v > 0:
		return 1
	case v < 0:
		return -1
	}
	return 0
}

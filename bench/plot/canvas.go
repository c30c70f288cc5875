package main

import (
	"fmt"
	"image"
	"image/color"
	"image/png"
	"os"
)

// canvas is an RGBA image with the few drawing primitives the plots
// need: filled rectangles, lines and bitmap text.
type canvas struct {
	img  *image.RGBA
	font font
}

func newCanvas(w, h int) *canvas {
	c := &canvas{img: image.NewRGBA(image.Rect(0, 0, w, h)), font: newFont()}
	c.fill(0, 0, w, h, white)
	return c
}

var (
	white = color.RGBA{255, 255, 255, 255}
	black = color.RGBA{0, 0, 0, 255}
	grey  = color.RGBA{200, 200, 200, 255}
	dark  = color.RGBA{90, 90, 90, 255}
)

// fill paints the rectangle [x0,x1)x[y0,y1), clipped to the image.
func (c *canvas) fill(x0, y0, x1, y1 int, col color.RGBA) {
	r := image.Rect(x0, y0, x1, y1).Intersect(c.img.Bounds())
	for y := r.Min.Y; y < r.Max.Y; y++ {
		for x := r.Min.X; x < r.Max.X; x++ {
			c.img.SetRGBA(x, y, col)
		}
	}
}

// line draws a straight line with Bresenham's algorithm, width w.
func (c *canvas) line(x0, y0, x1, y1, w int, col color.RGBA) {
	dx, dy := abs(x1-x0), -abs(y1-y0)
	sx, sy := sign(x1-x0), sign(y1-y0)
	err := dx + dy
	for {
		c.fill(x0-w/2, y0-w/2, x0-w/2+w, y0-w/2+w, col)
		if x0 == x1 && y0 == y1 {
			return
		}
		if e2 := 2 * err; e2 >= dy {
			err += dy
			x0 += sx
		} else {
			err += dx
			y0 += sy
		}
	}
}

// text draws s with its top-left corner at (x, y), each font pixel a
// scale x scale square.
func (c *canvas) text(x, y int, s string, scale int, col color.RGBA) {
	for _, r := range s {
		g := c.font.glyph(r)
		for row, bits := range g {
			for col5 := range glyphW {
				if bits&(1<<(glyphW-1-col5)) != 0 {
					c.fill(x+col5*scale, y+row*scale, x+(col5+1)*scale, y+(row+1)*scale, col)
				}
			}
		}
		x += advance * scale
	}
}

func (c *canvas) save(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := png.Encode(f, c.img); err != nil {
		f.Close()
		return fmt.Errorf("writing %s: %w", path, err)
	}
	return f.Close()
}

func abs(v int) int {
	if v < 0 {
		return -v
	}
	return v
}

func sign(v int) int {
	switch {
	case v < 0:
		return -1
	case v > 0:
		return 1
	}
	return 0
}

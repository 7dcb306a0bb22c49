// Command enqueue measures `reconcile enqueue` as a whole process, from
// start to exit, against a running PostgreSQL with stock durability: wall
// time, rows per second and peak RSS, for each input size, as medians of
// several runs.
//
//	go run ./bench/enqueue -rows 18000,1000000 -runs 3
//
// It uses DATABASE_URL when set, otherwise a throwaway durable cluster.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/reconcile/reconcile/internal/payments"
	"github.com/reconcile/reconcile/internal/pgserver"
	"github.com/reconcile/reconcile/internal/sample"
	"github.com/reconcile/reconcile/migrations"
)

func main() {
	rows := flag.String("rows", "18000,1000000", "comma-separated input sizes")
	runs := flag.Int("runs", 3, "runs per size")
	format := flag.String("format", "csv", "input format: csv or jsonl")
	flag.Parse()
	if err := run(context.Background(), *rows, *runs, payments.Format(*format)); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context, sizes string, runs int, format payments.Format) error {
	dir, err := os.MkdirTemp("", "reconcile-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)

	url := os.Getenv("DATABASE_URL")
	if url == "" {
		c, err := pgserver.Start(ctx, pgserver.Config{Durable: true})
		if err != nil {
			return err
		}
		defer c.Stop()
		admin := c.ConnString("postgres")
		if err := exec.Command("psql", admin, "-qc", "CREATE DATABASE bench").Run(); err != nil {
			return fmt.Errorf("create database: %w", err)
		}
		url = c.ConnString("bench")
	}
	if _, err := migrations.Up(ctx, url); err != nil {
		return err
	}
	bin := filepath.Join(dir, "reconcile")
	if out, err := exec.Command("go", "build", "-o", bin, "./cmd/reconcile").CombinedOutput(); err != nil {
		return fmt.Errorf("build: %v: %s", err, out)
	}

	fmt.Printf("%-10s %-6s %12s %14s %12s\n", "rows", "runs", "median wall", "median rows/s", "max RSS")
	date := payments.Date{Year: 2020, Month: time.January, Day: 1}
	for _, s := range strings.Split(sizes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n <= 0 {
			return fmt.Errorf("-rows %q: not a positive count", s)
		}
		var walls []time.Duration
		var rss []int64
		for range runs {
			date = date.AddDays(1)
			file := filepath.Join(dir, fmt.Sprintf("payments-%s.%s", date, format))
			f, err := os.Create(file)
			if err != nil {
				return err
			}
			if err := sample.Write(f, format, sample.Config{Date: date, Count: n, Seed: uint64(n)}); err != nil {
				return err
			}
			if err := f.Close(); err != nil {
				return err
			}
			cmd := exec.Command(bin, "enqueue", "--date", date.String(), "--source", file, "--log-format", "json")
			cmd.Env = append(os.Environ(), "DATABASE_URL="+url)
			start := time.Now()
			out, err := cmd.CombinedOutput()
			wall := time.Since(start)
			if err != nil {
				return fmt.Errorf("enqueue %d rows: %v: %s", n, err, out)
			}
			walls = append(walls, wall)
			if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
				rss = append(rss, ru.Maxrss) // KiB on Linux
			}
			_ = os.Remove(file)
		}
		slices.Sort(walls)
		med := walls[len(walls)/2]
		fmt.Printf("%-10d %-6d %12s %14.0f %9.1f MB\n", n, runs, med.Round(time.Millisecond),
			float64(n)/med.Seconds(), float64(slices.Max(rss))/1024)
	}
	return nil
}

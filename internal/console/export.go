package console

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// Exports (discrepancy and dead-letter CSV/JSON, audit verification and
// bundles) read whole runs. Each is written at the database's pace into a
// temporary file, in one read-only transaction on a connection of the
// exports' own pool, and only then sent at the client's pace with a write
// deadline: a slow reader holds a file, never a transaction or a page's
// connection, and memory stays bounded whatever the run's size. At most
// Config.MaxExports run at once, one per user.

// exportSlots bounds the exports running: max at once, one per user.
type exportSlots struct {
	mu    sync.Mutex
	max   int
	users map[string]bool
}

// errExportsBusy and errUserExporting are answered 429 with a Retry-After.
var (
	errExportsBusy   = errors.New("exports are all taken")
	errUserExporting = errors.New("an export of this user is running")
)

// acquire takes a slot for user, or says why not.
func (s *exportSlots) acquire(user string) (release func(), err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.users[user]:
		return nil, errUserExporting
	case len(s.users) >= s.max:
		return nil, errExportsBusy
	}
	s.users[user] = true
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		delete(s.users, user)
	}, nil
}

// exportRetry is the Retry-After of a refused export: about the time an
// export of a large run takes.
const exportRetry = 30 * time.Second

// sendStall is the longest a client may take to accept one chunk of an
// export; past it the connection is closed.
const sendStall = 30 * time.Second

// sendChunk is the size of the chunks an export is sent in, each with its
// own write deadline.
const sendChunk = 64 << 10

// newExportPool opens the exports' own connections: pool's settings with
// at most n connections, so that exports never take a page's.
func newExportPool(ctx context.Context, pool *pgxpool.Pool, n int) (*pgxpool.Pool, error) {
	cfg := pool.Config().Copy()
	cfg.MaxConns, cfg.MinConns = int32(n), 0
	p, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("console: open the exports' pool: %w", err)
	}
	return p, nil
}

// download is what an export sends: a file name and a content type.
type download struct {
	name        string
	contentType string
}

// export stages what write writes, reading in one read-only transaction on
// a connection of the exports' own pool, and sends it (see stage).
func (h *Handler) export(w http.ResponseWriter, r *http.Request, u User, write func(ctx context.Context, rd *reader, out io.Writer) (download, error)) error {
	return h.stage(w, r, u, func(ctx context.Context, out io.Writer) (download, error) {
		var d download
		err := h.readOn(ctx, h.exportPool, h.cfg.ExportTimeout, func(rd *reader) error {
			var err error
			d, err = write(ctx, rd, out)
			return err
		})
		return d, err
	})
}

// stage runs write with a slot of the exports, into a temporary file, and
// then sends the file as the download write names. An error of write is
// answered as an error page, since nothing has been sent yet.
func (h *Handler) stage(w http.ResponseWriter, r *http.Request, u User, write func(ctx context.Context, out io.Writer) (download, error)) error {
	release, err := h.exports.acquire(u.Name)
	if err != nil {
		w.Header().Set("Retry-After", strconv.Itoa(int(exportRetry/time.Second)))
		msg := fmt.Sprintf("%d exports are running, the most the console allows at once; try again in a minute", h.cfg.MaxExports)
		if errors.Is(err, errUserExporting) {
			msg = "an export of yours is still running (or still being downloaded); try again when it is done"
		}
		return &httpError{code: http.StatusTooManyRequests, msg: msg}
	}
	defer release()
	f, err := os.CreateTemp(h.cfg.TempDir, "reconcile-export-*")
	if err != nil {
		return fmt.Errorf("stage export: %w", err)
	}
	defer os.Remove(f.Name())
	defer f.Close()

	ctx, cancel := context.WithTimeout(r.Context(), h.cfg.ExportTimeout)
	defer cancel()
	bw := bufio.NewWriterSize(f, sendChunk)
	d, err := write(ctx, bw)
	if err != nil {
		return err
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("stage export: %w", err)
	}
	size, err := f.Seek(0, io.SeekCurrent)
	if err != nil {
		return fmt.Errorf("stage export: %w", err)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return fmt.Errorf("stage export: %w", err)
	}
	w.Header().Set("Content-Type", d.contentType)
	w.Header().Set("Content-Disposition", `attachment; filename="`+d.name+`"`)
	w.Header().Set("Content-Length", strconv.FormatInt(size, 10))
	if err := sendFile(ctx, w, f); err != nil {
		// The headers are sent: the cut-short download tells the client.
		h.cfg.Logger.Warn("export not sent", "user", u.Name, "file", d.name, "bytes", size, "err", err)
	}
	return nil
}

// sendFile copies f to w in chunks, each of which the client must accept
// within sendStall, all of them before ctx ends.
func sendFile(ctx context.Context, w http.ResponseWriter, f io.Reader) error {
	rc := http.NewResponseController(w)
	buf := make([]byte, sendChunk)
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		n, err := f.Read(buf)
		if n > 0 {
			deadline := time.Now().Add(sendStall)
			if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
				deadline = d
			}
			_ = rc.SetWriteDeadline(deadline) // a writer without deadlines keeps the server's
			if _, werr := w.Write(buf[:n]); werr != nil {
				return werr
			}
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

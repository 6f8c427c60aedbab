package replay

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"

	"github.com/callsheet/callsheet/events"
	"github.com/callsheet/callsheet/workspace"
)

// Rewound says what a rewind restored.
type Rewound struct {
	Call     string   `json:"call"`
	Restored []string `json:"restored"`
	Removed  []string `json:"removed"`
}

// Restore writes each checkpointed pre-image back into the workspace ws
// (atomically, with its mode) and removes the files that did not exist then.
// get reads a pre-image from the object store.
//
// Every path goes through ws (docs/security.md, "Workspace"): it is
// workspace-relative, and a directory along it that is a link leading out
// (or is swapped for one while Restore runs) makes that file fail with an
// error matching workspace.ErrOutside; nothing outside is written or
// removed. A file is written as the path itself: a link there is replaced,
// not followed. Restored files and the directories made for them take the
// workspace's owner when the node runs as root. Restore stops at the first
// file that fails and reports what it had done so far.
func Restore(ctx context.Context, get func(context.Context, string) ([]byte, error), ws *workspace.Dir, files []events.FileCheckpointed) (Rewound, error) {
	res := Rewound{Restored: []string{}, Removed: []string{}}
	for _, f := range files {
		rel, err := ws.Rel(f.Path)
		if err != nil {
			return res, fmt.Errorf("rewind %s: %w", f.Path, err)
		}
		if !f.Existed {
			if err := ws.Root().Remove(rel); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return res, restoreErr("removing", rel, err)
			}
			res.Removed = append(res.Removed, rel)
			continue
		}
		data, err := get(ctx, f.Object)
		if err != nil {
			return res, fmt.Errorf("rewind: pre-image of %s: %w", rel, err)
		}
		if err := ws.MkdirAll(filepath.Dir(rel)); err != nil {
			return res, restoreErr("writing", rel, err)
		}
		if err := ws.WriteFile(rel, data, fs.FileMode(f.Mode)); err != nil {
			return res, restoreErr("writing", rel, err)
		}
		res.Restored = append(res.Restored, rel)
	}
	return res, nil
}

// restoreErr words a failed restore of rel; a path the workspace's root
// refuses to follow out is an *workspace.OutsideError.
func restoreErr(verb, rel string, err error) error {
	if workspace.Escaped(err) {
		return fmt.Errorf("rewind: %s %s: %w", verb, rel, &workspace.OutsideError{Path: rel})
	}
	return fmt.Errorf("rewind: %s %s: %w", verb, rel, err)
}

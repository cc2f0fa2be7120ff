package measure

import (
	"os/exec"
	"strings"
)

// Commit names the code a run measured, for its report: the repository's
// HEAD as `git rev-parse --short=12` prints it, with "+changes" when the
// work tree differs from it, or "unknown (not a git checkout)". It runs git
// in the current directory (bench/ or the repository's root: one
// repository).
func Commit() string {
	out, err := exec.Command("git", "rev-parse", "--short=12", "HEAD").Output()
	if err != nil {
		return "unknown (not a git checkout)"
	}
	commit := strings.TrimSpace(string(out))
	if status, err := exec.Command("git", "status", "--porcelain", "--untracked-files=no").Output(); err == nil && len(strings.TrimSpace(string(status))) > 0 {
		commit += "+changes"
	}
	return commit
}

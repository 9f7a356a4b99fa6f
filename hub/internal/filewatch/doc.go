// Package filewatch tells its caller, once things have settled, that a
// file may have changed: it watches the file's directory with fsnotify and
// calls back after a quiet period (the debounce) that follows the last
// relevant event.
//
// It watches the directory, not the file, because the two ways a
// configuration file is replaced atomically both swap directory entries
// and leave a watch on the old file's inode blind: an editor writes a
// temporary file and renames it over the old one, and a Kubernetes
// ConfigMap volume renames a new ..data symlink over the old one (the file
// itself is a symlink through ..data). Which entries count is the file's
// own name and every ".."-prefixed entry (the ConfigMap writer's).
//
// It does not read the file or decide whether it changed: the callback
// does (hub/internal/lbreload compares content hashes), so a spurious
// event costs one read. It owns no other policy.
package filewatch

package activities

// disk says how many bytes are free for the sandboxes on the host's
// disk, and how many must be; ok is false with no bound. A file system
// that cannot be read has none free.
func (c *Capacity) disk() (free, least int64, ok bool) {
	if c.DiskDir == "" || c.MinFreeDisk < 0 {
		return 0, 0, false
	}
	size, free, err := diskSpace(c.DiskDir)
	if err != nil {
		return 0, max(c.MinFreeDisk, 1), true
	}
	least = c.MinFreeDisk
	if least == 0 {
		least = DefaultMinFreeDisk(size)
	}
	return free, least, true
}

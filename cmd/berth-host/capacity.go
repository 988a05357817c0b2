package main

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/berth-dev/berth/hostworker"
)

// capacityFlags bound what a host holds: --max-sandboxes,
// --max-memory and --min-free-disk.
type capacityFlags struct {
	maxSandboxes int
	rawMemory    string
	maxMemory    int64 // as HostConfig.MaxMemory takes it
	rawDisk      string
	minFreeDisk  int64 // as HostConfig.MinFreeDisk takes it
}

// register declares the flags; memoryDefault says what an unset
// --max-memory means, for the help.
func (f *capacityFlags) register(cmd *cobra.Command, memoryDefault string) {
	cmd.Flags().IntVar(&f.maxSandboxes, "max-sandboxes", 0,
		"most sandboxes of the host's own providers (linux, docker, gvisor) this host holds at once; a creation past it goes to another host, or waits; 0 for no bound")
	cmd.Flags().StringVar(&f.rawMemory, "max-memory", "",
		"most memory, summed over those sandboxes' memory limits (e.g. 16Gi); 0 for no bound (default: "+memoryDefault+")")
	cmd.Flags().StringVar(&f.rawDisk, "min-free-disk", "",
		"free space to keep on --data-dir's file system (e.g. 20Gi): with less, the host takes no new sandbox; 0 for no bound (default: a twentieth of it, at least 1Gi, at most a tenth)")
	prev := cmd.PreRunE
	cmd.PreRunE = func(cmd *cobra.Command, args []string) error {
		if err := f.parse(); err != nil {
			return usageError{err}
		}
		if prev != nil {
			return prev(cmd, args)
		}
		return nil
	}
}

func (f *capacityFlags) parse() error {
	if f.maxSandboxes < 0 {
		return fmt.Errorf("--max-sandboxes %d: want 0 or more", f.maxSandboxes)
	}
	switch f.rawMemory {
	case "":
		f.maxMemory = 0 // the host's default
	case "0":
		f.maxMemory = -1
	default:
		n, err := parseBytes(f.rawMemory)
		if err != nil {
			return fmt.Errorf("--max-memory: %w", err)
		}
		f.maxMemory = n
	}
	switch f.rawDisk {
	case "":
		f.minFreeDisk = 0 // the default
	case "0":
		f.minFreeDisk = -1
	default:
		n, err := parseBytes(f.rawDisk)
		if err != nil {
			return fmt.Errorf("--min-free-disk: %w", err)
		}
		f.minFreeDisk = n
	}
	return nil
}

// config sets cfg's bounds.
func (f *capacityFlags) config(cfg *hostworker.HostConfig) {
	cfg.MaxSandboxes, cfg.MaxMemory, cfg.MinFreeDisk = f.maxSandboxes, f.maxMemory, f.minFreeDisk
}

// parseBytes reads sizes like 512Mi, 2Gi, 100M or 1048576.
func parseBytes(s string) (int64, error) {
	units := []struct {
		suffix string
		mult   int64
	}{{"Ki", 1 << 10}, {"Mi", 1 << 20}, {"Gi", 1 << 30}, {"Ti", 1 << 40}, {"K", 1e3}, {"M", 1e6}, {"G", 1e9}, {"T", 1e12}}
	mult := int64(1)
	for _, u := range units {
		if n, ok := strings.CutSuffix(s, u.suffix); ok {
			s, mult = n, u.mult
			break
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n <= 0 || n > (1<<62)/mult {
		return 0, fmt.Errorf("bad size %q (want e.g. 512Mi, 16Gi)", s)
	}
	return n * mult, nil
}

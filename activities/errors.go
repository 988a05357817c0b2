package activities

import "github.com/berth-dev/berth/errdefs/temporalerr"

// returned is the activity boundary: every activity returns through it
// (or through toTemporal), and errors become Temporal application errors
// only here, typed by their errdefs kind (temporalerr.To). Code behind it
// returns plain errors wrapping errdefs sentinels.
func returned[T any](v T, err error) (T, error) { return v, toTemporal(err) }

// toTemporal is returned for an activity without a result.
func toTemporal(err error) error { return temporalerr.To(err) }

// Package bayes forecasts training jobs from live events only.
package bayes

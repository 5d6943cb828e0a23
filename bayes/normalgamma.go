package bayes

import (
	"fmt"
	"math"
)

// NormalGamma is the conjugate prior of a Normal likelihood with unknown
// mean μ and precision λ: λ ~ Gamma(Alpha, rate Beta), μ | λ ~ N(Mu,
// 1/(Kappa·λ)). The update and predictive formulas are the standard ones
// (Murphy 2007, "Conjugate Bayesian analysis of the Gaussian
// distribution", §3 eqs. 86–89 and 100; Adams & MacKay 2007 use the same
// model in their example).
type NormalGamma struct {
	Mu, Kappa, Alpha, Beta float64
}

// Validate reports a parameter outside its domain: Mu finite, Kappa, Alpha
// and Beta finite and positive.
func (p NormalGamma) Validate() error {
	switch {
	case math.IsNaN(p.Mu) || math.IsInf(p.Mu, 0):
		return fmt.Errorf("bayes: normal-gamma mu %g must be finite", p.Mu)
	case !(p.Kappa > 0) || math.IsInf(p.Kappa, 0):
		return fmt.Errorf("bayes: normal-gamma kappa %g must be finite and positive", p.Kappa)
	case !(p.Alpha > 0) || math.IsInf(p.Alpha, 0):
		return fmt.Errorf("bayes: normal-gamma alpha %g must be finite and positive", p.Alpha)
	case !(p.Beta > 0) || math.IsInf(p.Beta, 0):
		return fmt.Errorf("bayes: normal-gamma beta %g must be finite and positive", p.Beta)
	}
	return nil
}

// Update returns the posterior after one observation x:
//
//	μ' = (κμ + x)/(κ+1), κ' = κ+1, α' = α+½, β' = β + κ(x−μ)²/(2(κ+1)).
func (p NormalGamma) Update(x float64) NormalGamma {
	d := x - p.Mu
	return NormalGamma{
		Mu:    p.Mu + d/(p.Kappa+1),
		Kappa: p.Kappa + 1,
		Alpha: p.Alpha + 0.5,
		Beta:  p.Beta + p.Kappa*d*d/(2*(p.Kappa+1)),
	}
}

// MeanVariance is the posterior variance of μ, β/(κ(α−1)) for α > 1, and
// +Inf otherwise.
func (p NormalGamma) MeanVariance() float64 {
	if p.Alpha <= 1 {
		return math.Inf(1)
	}
	return p.Beta / (p.Kappa * (p.Alpha - 1))
}

// PredictiveVariance is the variance of the next observation under the
// Student-t predictive, β(κ+1)/(κ(α−1)) for α > 1, and +Inf otherwise.
func (p NormalGamma) PredictiveVariance() float64 {
	if p.Alpha <= 1 {
		return math.Inf(1)
	}
	return p.Beta * (p.Kappa + 1) / (p.Kappa * (p.Alpha - 1))
}

// LogPredictive is the log density of x under the posterior predictive, a
// Student-t with 2α degrees of freedom, location μ and squared scale
// β(κ+1)/(ακ) (Murphy 2007 eq. 100).
func (p NormalGamma) LogPredictive(x float64) float64 {
	nu := 2 * p.Alpha
	s2 := p.Beta * (p.Kappa + 1) / (p.Alpha * p.Kappa)
	d := x - p.Mu
	lg1, _ := math.Lgamma((nu + 1) / 2)
	lg2, _ := math.Lgamma(nu / 2)
	return lg1 - lg2 - 0.5*math.Log(nu*math.Pi*s2) - (nu+1)/2*math.Log1p(d*d/(nu*s2))
}

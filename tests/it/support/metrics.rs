//! A Prometheus text page, read the way the tests need it.

/// One scrape of `/metrics`.
#[derive(Debug, Clone)]
pub struct Scrape(pub String);

impl Scrape {
    /// The sum of every sample whose line starts with `prefix`: a metric name (all its label
    /// sets), or a name with its whole `{labels}` (that one series); 0 when there is none.
    pub fn sum(&self, prefix: &str) -> f64 {
        self.samples()
            .filter(|l| l.starts_with(prefix))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    }

    /// Sample lines (not comments).
    pub fn samples(&self) -> impl Iterator<Item = &str> {
        self.0
            .lines()
            .filter(|l| !l.starts_with('#') && !l.is_empty())
    }

    pub fn text(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Display for Scrape {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

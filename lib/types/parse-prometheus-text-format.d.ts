// Types for parse-prometheus-text-format (the package ships none): its output follows prom2json.
declare module 'parse-prometheus-text-format' {
  interface Sample { value?: string; labels?: Record<string, string>; buckets?: Record<string, string>; quantiles?: Record<string, string>; count?: string; sum?: string }
  interface MetricFamily { name: string; help: string; type: string; metrics: Sample[] }
  export default function parsePrometheusTextFormat(text: string): MetricFamily[];
}

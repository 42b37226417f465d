package notify

// Alert is the alertmanager body's element type, for the schema tests.
type Alert = alert

// Crash points for the crash and chaos tests: TOLLGATE_FAULT_POINT=<point> SIGKILLs the process right there,
// so a test can kill a background job between two of its writes (no signal handler runs, nothing is flushed).
// Read once at start: in production the variable is unset and each call is one comparison with null.

export type FaultPoint =
  | 'payout:before_broadcast'
  | 'payout:after_broadcast'
  | 'payout:after_confirm'
  | 'settlement:after_record'
  | 'settlement:after_broadcast'

const armed = (process.env.TOLLGATE_FAULT_POINT as FaultPoint | undefined) ?? null

export function faultPoint(point: FaultPoint): void {
  if (armed === point) process.kill(process.pid, 'SIGKILL')
}

// The one interface every measured thing sits behind: a base URL to load, a PID to sample, a way to stop.
export interface Target {
  name: string
  /** http://127.0.0.1:port, no trailing slash. */
  base: string
  /** The process serving it (RSS samples in the soak); null when it is this process. */
  pid: number | null
  stop(): Promise<void>
}

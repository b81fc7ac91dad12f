// Tests wait for a condition, never for a time: poll until it holds, fail naming what was awaited once
// the deadline passes. No vitest import, so helpers and the chaos runner (plain node) share it.

export interface WaitOptions {
  /** Default 5 s. */
  timeoutMs?: number
  /** Default 20 ms. */
  intervalMs?: number
  /** Named in the timeout error; a function is called only then (to describe the state reached). */
  what: string | (() => string)
  /**
   * An error thrown by `check` counts as "not yet" (a server still starting refuses connections); the last
   * one is named in the timeout error. Without it, an error ends the wait at once.
   */
  retryErrors?: boolean
}

/**
 * Resolves with the first value of `check` that is not false, null or undefined. An error thrown by
 * `check` ends the wait at once (a process that exited will not start later), unless `retryErrors`.
 */
export async function waitFor<T>(
  check: () => T | false | null | undefined | Promise<T | false | null | undefined>,
  options: WaitOptions,
): Promise<T> {
  const timeoutMs = options.timeoutMs ?? 5_000
  const intervalMs = options.intervalMs ?? 20
  const deadline = Date.now() + timeoutMs
  let lastError: unknown = null
  for (;;) {
    let value: T | false | null | undefined = null
    try {
      value = await check()
    } catch (err) {
      if (!options.retryErrors) throw err
      lastError = err
    }
    if (value !== false && value !== null && value !== undefined) return value
    if (Date.now() > deadline) {
      const what = typeof options.what === 'function' ? options.what() : options.what
      const last = lastError ? ` (last error: ${(lastError as Error).message})` : ''
      throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}${last}`)
    }
    await new Promise((resolve) => setTimeout(resolve, intervalMs))
  }
}

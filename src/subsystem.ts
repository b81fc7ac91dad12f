// What every subsystem's start(deps) gives back to the wiring: how to stop it, check it, and reach it.
import type { ReadinessCheck } from './observability/admin.ts'

export type AdminRoutes = Record<string, () => Promise<{ status: number; body: unknown }>>

export interface Started {
  /** Called once on shutdown, in the reverse order of start. */
  stop(): Promise<void> | void
  readiness?: ReadinessCheck[]
  adminRoutes?: AdminRoutes
}

/** Starts subsystems in order and stops the started ones in reverse: on shutdown, or when a later one fails. */
export class StartedList {
  private readonly started: Started[] = []

  constructor(private readonly onStopError: (err: unknown) => void) {}

  add<T extends Started>(s: T): T {
    this.started.push(s)
    return s
  }

  readiness(): ReadinessCheck[] {
    return this.started.flatMap((s) => s.readiness ?? [])
  }

  adminRoutes(): AdminRoutes {
    return Object.assign({}, ...this.started.map((s) => s.adminRoutes ?? {}))
  }

  async stop(): Promise<void> {
    for (const s of this.started.splice(0).reverse()) {
      try {
        await s.stop()
      } catch (err) {
        this.onStopError(err)
      }
    }
  }
}

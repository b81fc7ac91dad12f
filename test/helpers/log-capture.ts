// A real pino logger whose JSON lines land in an array: tests read what the service logged.
import type { LogSettings } from '../../src/observability/logger.ts'
import { createLogger, type Logger } from '../../src/observability/logger.ts'
import { waitFor } from './wait-for.ts'

export interface CapturedLogs {
  logger: Logger
  lines: Array<Record<string, any>>
  /** Resolves with the first line that matches, polling until the deadline. */
  waitFor(match: (line: Record<string, any>) => boolean, timeoutMs?: number): Promise<Record<string, any>>
}

export function captureLogs(settings: LogSettings = { level: 'info' }): CapturedLogs {
  const lines: Array<Record<string, any>> = []
  const destination = {
    write(text: string) {
      for (const line of text.split('\n')) if (line) lines.push(JSON.parse(line))
    },
  }
  const logger = createLogger(settings, { destination })
  return {
    logger,
    lines,
    waitFor: (match, timeoutMs = 5_000) =>
      waitFor(() => lines.find(match), {
        timeoutMs,
        what: () => `a matching log line in:\n${lines.map((l) => JSON.stringify(l)).join('\n')}`,
      }),
  }
}

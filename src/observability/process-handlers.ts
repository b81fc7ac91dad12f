// Last-resort handlers for what nothing else caught. They log with context (one JSON line: the error's
// name, message, code and stack, the process id and uptime) and do not pretend it was fine: an uncaught
// exception leaves the process in an unknown state, so it exits (70, EX_SOFTWARE) for the supervisor to
// restart; an unhandled rejection is logged as an error and the process keeps serving.
import type { Logger } from './logger.ts'

export const EXIT_UNCAUGHT = 70

export function installProcessHandlers(
  logger: Logger,
  options: { exit?: (code: number) => void } = {},
): () => void {
  const exit = options.exit ?? ((code: number) => process.exit(code))
  const onException = (err: unknown, origin: string) => {
    logger.error('uncaught exception: the process exits', { origin, ...describe(err) })
    exit(EXIT_UNCAUGHT)
  }
  const onRejection = (reason: unknown) => {
    logger.error('unhandled promise rejection', describe(reason))
  }
  process.on('uncaughtException', onException)
  process.on('unhandledRejection', onRejection)
  return () => {
    process.removeListener('uncaughtException', onException)
    process.removeListener('unhandledRejection', onRejection)
  }
}

function describe(err: unknown): Record<string, unknown> {
  const fields: Record<string, unknown> = { pid: process.pid, uptime_s: Math.round(process.uptime()) }
  if (err instanceof Error) {
    fields.error_name = err.name
    fields.error_message = err.message
    const code = (err as { code?: unknown }).code
    if (code !== undefined) fields.error_code = code
    fields.stack = err.stack
  } else {
    fields.error_message = String(err)
  }
  return fields
}

// The one `postgres` client of a process. int8 columns come back as bigint (money is BIGINT base units).
import postgres from 'postgres'

export type Sql = postgres.Sql<{ bigint: bigint }>
export type Tx = postgres.TransactionSql<{ bigint: bigint }>

export interface SqlOptions {
  /** Connections in the pool. The embedded database multiplexes one session, so it must be 1 there. */
  max: number
  /** Extra connection settings such as application_name. */
  applicationName?: string
  /**
   * 'off' for writes that may be lost in a database crash without harm (captures: a lost capture is
   * refunded, never double-charged). Claims must keep the default: a lost claim could pay twice.
   */
  synchronousCommit?: 'on' | 'off'
}

export function createSql(url: string, options: SqlOptions): Sql {
  return postgres(url, {
    max: options.max,
    types: { bigint: postgres.BigInt },
    // Notices (e.g. "relation already exists, skipping") are not errors and would only be noise.
    onnotice: () => {},
    idle_timeout: 0,
    connect_timeout: 10,
    connection: {
      application_name: options.applicationName ?? 'tollgate',
      ...(options.synchronousCommit ? { synchronous_commit: options.synchronousCommit } : {}),
    },
  }) as unknown as Sql
}

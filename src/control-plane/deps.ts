// What the control plane is given by main.ts. Plain values, so it is easy to build in tests.
import type { Config } from '../config/schema.ts'
import type { Sql } from '../db/sql.ts'
import type { Logger } from '../observability/logger.ts'

export interface ChainInfo {
  network: 'local' | 'base' | 'base-sepolia'
  chainId: number
  /** x402 v1 network name and CAIP-2 id. */
  x402Network: string
  caip2: string
  treasury: `0x${string}`
  usdcAddress: `0x${string}`
  usdcName: string
  usdcVersion: string
  explorerUrl: string | null
}

export interface ControlPlaneDeps {
  config: Config
  sql: Sql
  chain: ChainInfo
  logger: Logger
  /** Base of payment_url / metered_url, e.g. https://pay.example.com */
  publicUrl(): string
  /**
   * Tells this instance's caches and, under a supervisor, its sibling workers' (resolves once they dropped
   * it); the database NOTIFY tells other instances.
   */
  onEndpointChanged(id: string): Promise<void> | undefined
}

// Every throwaway embedded database a test file starts (a service's, a migrated one's) starts from the image
// the global setup made: initdb runs once a run instead of once a database.
import { readFileSync } from 'node:fs'
import { inject } from 'vitest'
import { startThrowawayDatabasesFrom } from '../../src/db/embedded.ts'

startThrowawayDatabasesFrom(new Blob([readFileSync(inject('embeddedImagePath'))]))

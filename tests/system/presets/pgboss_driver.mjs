// The pg-boss 12 side of the ground-truth workload, run by the Node 22 binary of .presets/.
//
//   node pgboss_driver.mjs queues DSN           create the queues only
//   node pgboss_driver.mjs enqueue DSN          create the queues, send the jobs, cancel one
//   node pgboss_driver.mjs work DSN MARKER_DIR [supervise]
//                                              run workers (and, if asked, pg-boss's supervisor,
//                                              which expires lost jobs) until SIGTERM
//
// Every handler call is printed as one JSON line, so the harness can check the library's
// tables against what the handlers actually did.
import { existsSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { pathToFileURL } from 'node:url'

// pg-boss lives in the .presets/ cache, not beside this file, and ESM ignores NODE_PATH: the
// harness says where it is.
const { PgBoss } = await import(
  pathToFileURL(join(process.env.PRESETS_NODE_MODULES, 'pg-boss', 'dist', 'index.js')).href
)

export const QUEUES = {
  // partition: true gives the queue its own table under the LIST-partitioned pgboss.job.
  ok: { partition: true },
  flaky: { retryLimit: 2, retryDelay: 0 },
  bad_dlq: {}, // created before the queue that names it as its dead letter queue
  bad: { retryLimit: 1, retryDelay: 0, deadLetter: 'bad_dlq' },
  // Expiry is also enforced inside the worker (it fails a handler that overruns), so it must
  // outlast the rest of the workload, and stay short enough that the supervisor of the next
  // worker fails the killed worker's job within seconds.
  slow: { retryLimit: 1, retryDelay: 0, expireInSeconds: 12 },
  later: {},
  parked: {}
}
const PLAN = { ok: 20, flaky: 5, bad: 3, slow: 1, later: 2 }
const LATER_SECONDS = 3

function boss (dsn, extra = {}) {
  const instance = new PgBoss({ connectionString: dsn, schedule: false, ...extra })
  instance.on('error', (error) => console.error(JSON.stringify({ error: String(error) })))
  return instance
}

async function queues (dsn) {
  const b = boss(dsn, { supervise: false })
  await b.start()
  for (const [name, options] of Object.entries(QUEUES)) await b.createQueue(name, options)
  return b
}

async function enqueue (dsn) {
  const b = await queues(dsn)
  for (const [name, count] of Object.entries(PLAN)) {
    for (let n = 0; n < count; n++) {
      const options = name === 'later' ? { startAfter: LATER_SECONDS } : {}
      await b.send(name, { n }, options)
    }
  }
  await b.send('parked', { n: 0 }, { startAfter: 3600 })
  await b.send('parked', { n: 1 })
  await b.send('parked', { n: 2 })
  const cancelled = await b.send('parked', { n: 3 })
  await b.cancel('parked', cancelled)
  await b.stop({ graceful: false, wait: true })
}

async function work (dsn, markers, supervise) {
  const b = boss(dsn, {
    supervise,
    superviseIntervalSeconds: 1,
    monitorIntervalSeconds: 1
  })
  await b.start()
  const log = (queue, job, outcome) =>
    console.log(JSON.stringify({ queue, id: job.id, retryCount: job.retryCount, outcome }))
  const handlers = {
    ok: async (job) => ({ cost: 1.5 }),
    flaky: async (job) => {
      if (job.retryCount === 0) throw new Error('flaky: first attempt fails')
    },
    bad: async (job) => { throw new TypeError('bad: always fails') },
    slow: async (job) => {
      // The first run is SIGKILLed mid-job; the retry after expiry finds the marker.
      const marker = join(markers, `slow-${job.id}`)
      if (!existsSync(marker)) {
        writeFileSync(marker, '')
        log('slow', job, 'started-long')
        await new Promise((resolve) => setTimeout(resolve, 600_000))
      }
    },
    later: async (job) => null
  }
  for (const [queue, handler] of Object.entries(handlers)) {
    await b.work(queue, { pollingIntervalSeconds: 0.5, batchSize: 1 }, async ([job]) => {
      try {
        const result = await handler(job)
        log(queue, job, 'completed')
        return result
      } catch (error) {
        log(queue, job, 'failed')
        throw error
      }
    })
  }
  console.log(JSON.stringify({ ready: true }))
  process.on('SIGTERM', async () => {
    await b.stop({ graceful: true, wait: true, timeout: 10_000 })
    process.exit(0)
  })
}

const [command, dsn, markers, role] = process.argv.slice(2)
if (command === 'enqueue') await enqueue(dsn)
else if (command === 'queues') await (await queues(dsn)).stop({ graceful: false, wait: true })
else if (command === 'work') await work(dsn, markers, role === 'supervise')
else {
  console.error('usage: pgboss_driver.mjs queues DSN | enqueue DSN | work DSN MARKER_DIR [supervise]')
  process.exit(2)
}

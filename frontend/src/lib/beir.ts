/**
 * Labelled queries for an evaluation run, read in the browser from the files a team has: a BEIR-layout
 * set (`queries.jsonl`, a qrels `.tsv`, optionally `corpus.jsonl`), or a question list of our own
 * format (CSV or JSONL, {@link QUESTION_LIST_EXAMPLES}). Pure functions: text in, queries and errors
 * out. Every malformed line is reported with its 1-based line number, and the server's limits are
 * checked here so that a run is never refused for them.
 *
 * Judgements of grade 0 are left out: a document judged not relevant changes none of the measures
 * (nDCG, recall, MRR count relevant documents only), and leaving them out keeps the per-query label
 * limit for the relevant ones.
 */

import { EVALUATION_LIMITS, MAX_QUERY_CHARS, type EvaluationQuery } from './evaluationApi'

/** What is wrong with one line (or, at line 0, with a file as a whole). The page words it from `code`. */
export interface LineError {
  /** The file's name as chosen. */
  file: string
  /** 1-based; 0 for the file as a whole. */
  line: number
  code: ParseErrorCode
  /** The values the message names: an id, a count, a limit, an earlier line. */
  params?: Record<string, string | number>
}

export type ParseErrorCode =
  | 'empty_file'
  | 'invalid_json'
  | 'missing_field'
  | 'id_too_long'
  | 'duplicate_id'
  | 'empty_text'
  | 'text_too_long'
  | 'bad_columns'
  | 'bad_grade'
  | 'empty_label'
  | 'unknown_query'
  | 'duplicate_judgement'
  | 'too_many_labels'
  | 'no_relevant'
  | 'too_many_queries'
  | 'no_queries'
  | 'unclosed_quote'
  | 'missing_column'
  | 'bad_file_name'

/** Labelled queries ready to send, or the errors that stop them. */
export interface EvaluationSet {
  queries: EvaluationQuery[]
  errors: LineError[]
  /** Queries of the queries file that no judgement names as relevant: not run. */
  leftOut: number
  /** Judgements of grade 0, left out. */
  zeroGrades: number
}

/** A label is a document's id, file name, or file name without its extension. */
export const CORPUS_FILE_EXTENSION = '.txt'
/** The longest file name the upload takes (`MAX_FILE_NAME_CHARS` of the ingestion service). */
export const MAX_FILE_NAME_CHARS = 255

/** How the question-list formats look; the page shows these. */
export const QUESTION_LIST_EXAMPLES = {
  csv: [
    'id,question,relevant',
    'q1,How do I reset my password?,account-guide.pdf',
    'q2,"Which plans include SSO, and at what price?",pricing.md;security-faq',
  ].join('\n'),
  jsonl: [
    '{"id": "q1", "question": "How do I reset my password?", "relevant": ["account-guide.pdf"]}',
    '{"question": "Which plans include SSO?", "relevant": {"pricing.md": 2, "security-faq": 1}}',
  ].join('\n'),
}

/** What separates the relevant documents in a CSV cell. */
export const CSV_LABEL_SEPARATOR = ';'

// --- BEIR ----------------------------------------------------------------------------------------

export interface BeirQuery {
  id: string
  text: string
  line: number
}

export interface Judgement {
  queryId: string
  label: string
  grade: number
  line: number
}

export interface CorpusEntry {
  id: string
  title: string
  text: string
  line: number
}

/** The queries of a BEIR `queries.jsonl`: one `{"_id", "text"}` object per line. */
export function parseQueriesJsonl(text: string, file = 'queries.jsonl'): { queries: BeirQuery[]; errors: LineError[] } {
  const errors: LineError[] = []
  const queries: BeirQuery[] = []
  const seen = new Map<string, number>()
  for (const { line, value } of jsonLines(text, file, errors)) {
    const id = idField(value, '_id')
    const body = value.text
    if (id === null) errors.push({ file, line, code: 'missing_field', params: { field: '_id' } })
    else if (typeof body !== 'string') errors.push({ file, line, code: 'missing_field', params: { field: 'text' } })
    else if (seen.has(id)) errors.push({ file, line, code: 'duplicate_id', params: { id, first: seen.get(id)! } })
    else {
      seen.set(id, line)
      queries.push({ id, text: body.trim(), line })
    }
  }
  return { queries, errors: inLineOrder(errors) }
}

/**
 * The judgements of a BEIR qrels file: `query-id`, `corpus-id`, `score` separated by tabs, one per
 * line, under a header line that may be absent. A score is a whole number from 0 to 100.
 */
export function parseQrelsTsv(text: string, file = 'qrels.tsv'): { judgements: Judgement[]; errors: LineError[] } {
  const errors: LineError[] = []
  const judgements: Judgement[] = []
  const lines = splitLines(text)
  const first = lines.findIndex((l) => l.trim() !== '') + 1
  if (first === 0) errors.push({ file, line: 0, code: 'empty_file' })
  lines.forEach((raw, index) => {
    const line = index + 1
    if (raw.trim() === '') return
    const columns = raw.split('\t').map((c) => c.trim())
    if (line === first && isQrelsHeader(columns)) return
    if (columns.length !== 3) {
      errors.push({ file, line, code: 'bad_columns', params: { count: columns.length, expected: 3 } })
      return
    }
    const [queryId, label, score] = columns
    const grade = parseGrade(score)
    if (grade === null) errors.push({ file, line, code: 'bad_grade', params: { value: score } })
    else if (!queryId) errors.push({ file, line, code: 'missing_field', params: { field: 'query-id' } })
    else if (!label) errors.push({ file, line, code: 'empty_label' })
    else judgements.push({ queryId, label, grade, line })
  })
  return { judgements, errors }
}

/**
 * A BEIR set's labelled queries: each query with at least one relevant judgement, its labels the
 * judged corpus ids. Errors from both files, then those of the limits.
 */
export function beirEvaluationSet(
  queriesFile: { name: string; text: string },
  qrelsFile: { name: string; text: string },
): EvaluationSet {
  const parsedQueries = parseQueriesJsonl(queriesFile.text, queriesFile.name)
  const parsedQrels = parseQrelsTsv(qrelsFile.text, qrelsFile.name)
  const errors = [...parsedQueries.errors, ...parsedQrels.errors]
  const byId = new Map(parsedQueries.queries.map((q) => [q.id, q]))
  const relevant = new Map<string, Map<string, Judgement>>()
  let zeroGrades = 0
  for (const judgement of parsedQrels.judgements) {
    const file = qrelsFile.name
    if (!byId.has(judgement.queryId)) {
      errors.push({ file, line: judgement.line, code: 'unknown_query', params: { id: judgement.queryId } })
      continue
    }
    const labels = relevant.get(judgement.queryId) ?? new Map<string, Judgement>()
    const earlier = labels.get(judgement.label)
    if (earlier) {
      errors.push({
        file,
        line: judgement.line,
        code: 'duplicate_judgement',
        params: { id: judgement.queryId, label: judgement.label, first: earlier.line },
      })
      continue
    }
    labels.set(judgement.label, judgement)
    relevant.set(judgement.queryId, labels)
  }
  const queries: EvaluationQuery[] = []
  for (const query of parsedQueries.queries) {
    const judged = [...(relevant.get(query.id)?.values() ?? [])]
    zeroGrades += judged.filter((j) => j.grade === 0).length
    const positive = judged.filter((j) => j.grade > 0)
    if (positive.length === 0) continue
    const fault = queryFault(query.id, query.text)
    if (fault) {
      errors.push({ file: queriesFile.name, line: query.line, ...fault })
      continue
    }
    if (positive.length > EVALUATION_LIMITS.maxLabelsPerQuery) {
      errors.push({
        file: qrelsFile.name,
        line: positive[EVALUATION_LIMITS.maxLabelsPerQuery].line,
        code: 'too_many_labels',
        params: { id: query.id, count: positive.length, limit: EVALUATION_LIMITS.maxLabelsPerQuery },
      })
      continue
    }
    queries.push({ id: query.id, text: query.text, relevant: Object.fromEntries(positive.map((j) => [j.label, j.grade])) })
  }
  // A query dropped for an error above is reported there, not counted as left out.
  const leftOut = parsedQueries.queries.filter((q) => ![...(relevant.get(q.id)?.values() ?? [])].some((j) => j.grade > 0)).length
  return finish(queries, errors, qrelsFile.name, leftOut, zeroGrades)
}

/** The entries of a BEIR `corpus.jsonl`: one `{"_id", "title", "text"}` object per line. An entry
 * with neither title nor text would be an empty file: it is left out and its line reported in `empty`. */
export function parseCorpusJsonl(
  text: string,
  file = 'corpus.jsonl',
): { entries: CorpusEntry[]; errors: LineError[]; empty: number[] } {
  const errors: LineError[] = []
  const entries: CorpusEntry[] = []
  const empty: number[] = []
  const seen = new Map<string, number>()
  const maxIdChars = MAX_FILE_NAME_CHARS - CORPUS_FILE_EXTENSION.length
  for (const { line, value } of jsonLines(text, file, errors)) {
    const id = idField(value, '_id')
    const title = typeof value.title === 'string' ? value.title.trim() : ''
    const body = typeof value.text === 'string' ? value.text.trim() : ''
    if (id === null) errors.push({ file, line, code: 'missing_field', params: { field: '_id' } })
    else if (/[/\\\0]/.test(id) || id.length > maxIdChars || id === '.' || id === '..') {
      errors.push({ file, line, code: 'bad_file_name', params: { id, limit: maxIdChars } })
    } else if (seen.has(id)) errors.push({ file, line, code: 'duplicate_id', params: { id, first: seen.get(id)! } })
    else if (!title && !body) {
      seen.set(id, line)
      empty.push(line)
    } else {
      seen.set(id, line)
      entries.push({ id, title, text: body, line })
    }
  }
  return { entries, errors: inLineOrder(errors), empty }
}

/** The file a corpus entry is uploaded as: `<_id>.txt`, its title, a blank line, its text. Its name
 * without the extension is the entry's id, which the qrels use as the label. */
export function corpusFile(entry: CorpusEntry): File {
  const content = entry.title && entry.text ? `${entry.title}\n\n${entry.text}` : entry.title || entry.text
  return new File([content], `${entry.id}${CORPUS_FILE_EXTENSION}`, { type: 'text/plain' })
}

/** How many of the queries' labels name no entry of the corpus. */
export function labelsMissingFromCorpus(queries: EvaluationQuery[], entries: CorpusEntry[]): number {
  const ids = new Set(entries.map((e) => e.id))
  const labels = new Set(queries.flatMap((q) => Object.keys(q.relevant)))
  return [...labels].filter((label) => !ids.has(label)).length
}

/**
 * The files of a dropped BEIR folder by role: `queries.jsonl`, `corpus.jsonl`, and the qrels — of
 * several `.tsv` files (train, dev, test) `test.tsv`, else `dev.tsv`, else the first.
 */
export function assignBeirFiles<F extends { name: string }>(files: F[]): { queries?: F; qrels?: F; corpus?: F } {
  const named = (name: string) => files.find((f) => f.name.toLowerCase() === name)
  const tsv = files.filter((f) => f.name.toLowerCase().endsWith('.tsv'))
  return {
    queries: named('queries.jsonl'),
    corpus: named('corpus.jsonl'),
    qrels: named('test.tsv') ?? named('dev.tsv') ?? tsv[0],
  }
}

// --- question lists ------------------------------------------------------------------------------

/**
 * Labelled queries from a question list: CSV (a header naming `question` and `relevant`, optionally
 * `id`; the relevant documents separated by `;`) or JSONL (`{"id"?, "question", "relevant"}`, with
 * `relevant` a list of documents or an object of document → grade). Which one by the file's
 * extension (`.csv`, `.jsonl`, `.ndjson`, `.json`), else by whether the first character is `{`.
 * A query without an id gets `q<n>`, n counting the list's questions from 1.
 */
export function parseQuestionList(text: string, file: string): EvaluationSet {
  const lower = file.toLowerCase()
  const jsonl = /\.(jsonl|ndjson|json)$/.test(lower) || (!lower.endsWith('.csv') && stripBom(text).trimStart().startsWith('{'))
  return jsonl ? questionJsonl(text, file) : questionCsv(text, file)
}

function questionJsonl(text: string, file: string): EvaluationSet {
  const errors: LineError[] = []
  const queries: EvaluationQuery[] = []
  const seen = new Map<string, number>()
  let zeroGrades = 0
  let count = 0
  for (const { line, value } of jsonLines(text, file, errors)) {
    count += 1
    const id = idField(value, 'id') ?? `q${count}`
    const question = typeof value.question === 'string' ? value.question : value.text
    if (typeof question !== 'string') {
      errors.push({ file, line, code: 'missing_field', params: { field: 'question' } })
      continue
    }
    const relevant = gradedLabels(value.relevant)
    if (relevant === null) {
      errors.push({ file, line, code: 'missing_field', params: { field: 'relevant' } })
      continue
    }
    if (relevant.badGrade !== null) {
      errors.push({ file, line, code: 'bad_grade', params: { value: relevant.badGrade } })
      continue
    }
    zeroGrades += relevant.zero
    const fault = queryFault(id, question.trim()) ?? labelsFault(id, relevant.labels, seen)
    if (fault) errors.push({ file, line, ...fault })
    else {
      seen.set(id, line)
      queries.push({ id, text: question.trim(), relevant: relevant.labels })
    }
  }
  return finish(queries, errors, file, 0, zeroGrades)
}

function questionCsv(text: string, file: string): EvaluationSet {
  const errors: LineError[] = []
  const queries: EvaluationQuery[] = []
  const { records, unclosed } = csvRecords(text)
  if (unclosed !== null) errors.push({ file, line: unclosed, code: 'unclosed_quote' })
  const rows = records.filter((r) => r.fields.some((f) => f.trim() !== ''))
  if (rows.length === 0) {
    if (unclosed === null) errors.push({ file, line: 0, code: 'empty_file' })
    return finish(queries, errors, file, 0, 0, false)
  }
  const [header, ...body] = rows
  const names = header.fields.map((f) => f.trim().toLowerCase())
  const column = (...aliases: string[]) => names.findIndex((n) => aliases.includes(n))
  const idColumn = column('id')
  const questionColumn = column('question', 'text')
  const relevantColumn = column('relevant')
  for (const [name, index] of [['question', questionColumn], ['relevant', relevantColumn]] as const) {
    if (index < 0) errors.push({ file, line: header.line, code: 'missing_column', params: { column: name } })
  }
  if (questionColumn < 0 || relevantColumn < 0) return finish(queries, errors, file, 0, 0, false)
  const seen = new Map<string, number>()
  body.forEach((record, index) => {
    const line = record.line
    if (record.fields.length !== names.length) {
      errors.push({ file, line, code: 'bad_columns', params: { count: record.fields.length, expected: names.length } })
      return
    }
    const id = (idColumn >= 0 ? record.fields[idColumn].trim() : '') || `q${index + 1}`
    const question = record.fields[questionColumn].trim()
    const labels = Object.fromEntries(
      record.fields[relevantColumn]
        .split(CSV_LABEL_SEPARATOR)
        .map((label) => label.trim())
        .filter(Boolean)
        .map((label) => [label, 1]),
    )
    const fault = queryFault(id, question) ?? labelsFault(id, labels, seen)
    if (fault) errors.push({ file, line, ...fault })
    else {
      seen.set(id, line)
      queries.push({ id, text: question, relevant: labels })
    }
  })
  return finish(queries, errors, file, 0, 0)
}

// --- shared checks -------------------------------------------------------------------------------

type Fault = Pick<LineError, 'code' | 'params'>

/** What of a query's id and text breaks a limit of the server. */
function queryFault(id: string, text: string): Fault | null {
  if (id.length > EVALUATION_LIMITS.maxQueryIdChars) {
    return { code: 'id_too_long', params: { id: `${id.slice(0, 40)}…`, limit: EVALUATION_LIMITS.maxQueryIdChars } }
  }
  if (!text) return { code: 'empty_text', params: { id } }
  if (text.length > MAX_QUERY_CHARS) return { code: 'text_too_long', params: { id, limit: MAX_QUERY_CHARS } }
  return null
}

/** What of a question list's labels (and id) breaks a limit; `seen` holds the ids met so far. */
function labelsFault(id: string, labels: Record<string, number>, seen: Map<string, number>): Fault | null {
  if (seen.has(id)) return { code: 'duplicate_id', params: { id, first: seen.get(id)! } }
  const count = Object.keys(labels).length
  if (count === 0) return { code: 'no_relevant', params: { id } }
  if (count > EVALUATION_LIMITS.maxLabelsPerQuery) {
    return { code: 'too_many_labels', params: { id, count, limit: EVALUATION_LIMITS.maxLabelsPerQuery } }
  }
  return null
}

/** The set with the whole-file checks added: some query to run, and not more than a run takes. */
function finish(
  queries: EvaluationQuery[],
  errors: LineError[],
  file: string,
  leftOut: number,
  zeroGrades: number,
  checkEmpty = true,
): EvaluationSet {
  if (queries.length > EVALUATION_LIMITS.maxQueries) {
    errors.push({ file, line: 0, code: 'too_many_queries', params: { count: queries.length, limit: EVALUATION_LIMITS.maxQueries } })
  } else if (checkEmpty && queries.length === 0 && errors.length === 0) {
    errors.push({ file, line: 0, code: 'no_queries' })
  }
  return { queries, errors: inLineOrder(errors), leftOut, zeroGrades }
}

/** Errors file by file (in the order the files first appear), each file's by line. */
function inLineOrder(errors: LineError[]): LineError[] {
  const files = [...new Set(errors.map((e) => e.file))]
  return [...errors].sort((a, b) => files.indexOf(a.file) - files.indexOf(b.file) || a.line - b.line)
}

/** A relevance grade from text: a whole number from 0 to 100 (`2`, `2.0`); null otherwise. */
function parseGrade(text: string): number | null {
  if (!/^\d+(\.0+)?$/.test(text)) return null
  const grade = Number(text)
  return grade >= EVALUATION_LIMITS.minGrade && grade <= EVALUATION_LIMITS.maxGrade ? grade : null
}

/** A JSONL `relevant`: a list of labels (grade 1 each) or an object of label → grade; null when it is
 * neither. Grades of 0 are counted in `zero` and left out; the first grade out of range in `badGrade`. */
function gradedLabels(value: unknown): { labels: Record<string, number>; zero: number; badGrade: string | null } | null {
  if (Array.isArray(value)) {
    if (!value.every((label) => typeof label === 'string')) return null
    const labels = value.map((label: string) => label.trim()).filter(Boolean)
    return { labels: Object.fromEntries(labels.map((label) => [label, 1])), zero: 0, badGrade: null }
  }
  if (typeof value !== 'object' || value === null) return null
  const labels: Record<string, number> = {}
  let zero = 0
  for (const [label, grade] of Object.entries(value)) {
    const parsed = typeof grade === 'number' ? parseGrade(String(grade)) : null
    if (parsed === null) return { labels, zero, badGrade: `${label}: ${JSON.stringify(grade)}` }
    if (parsed === 0) zero += 1
    else if (label.trim()) labels[label.trim()] = parsed
  }
  return { labels, zero, badGrade: null }
}

// --- reading lines -------------------------------------------------------------------------------

function stripBom(text: string): string {
  return text.charCodeAt(0) === 0xfeff ? text.slice(1) : text
}

function splitLines(text: string): string[] {
  return stripBom(text).split(/\r\n|\n|\r/)
}

/** Whether the first line is a header (`query-id  corpus-id  score`, or other names): its last column is no grade. */
function isQrelsHeader(columns: string[]): boolean {
  return columns.length === 3 && parseGrade(columns[2]) === null && !/^-?\d/.test(columns[2])
}

/** The JSON objects of a JSONL text with their line numbers; a line that is not one is an error. An
 * all-blank text is an `empty_file` error. */
function jsonLines(text: string, file: string, errors: LineError[]): { line: number; value: Record<string, unknown> }[] {
  const out: { line: number; value: Record<string, unknown> }[] = []
  const lines = splitLines(text)
  lines.forEach((raw, index) => {
    if (raw.trim() === '') return
    let value: unknown
    try {
      value = JSON.parse(raw)
    } catch {
      value = undefined
    }
    if (typeof value !== 'object' || value === null || Array.isArray(value)) {
      errors.push({ file, line: index + 1, code: 'invalid_json' })
      return
    }
    out.push({ line: index + 1, value: value as Record<string, unknown> })
  })
  if (out.length === 0 && !errors.some((e) => e.file === file)) errors.push({ file, line: 0, code: 'empty_file' })
  return out
}

/** An id field: a non-empty string, or a number (some sets write numeric ids), as a string. */
function idField(value: Record<string, unknown>, key: string): string | null {
  const raw = value[key]
  if (typeof raw === 'number' && Number.isFinite(raw)) return String(raw)
  if (typeof raw === 'string' && raw.trim() !== '') return raw.trim()
  return null
}

/**
 * The records of a CSV text (RFC 4180: `,` between fields, `"` around a field holding `,`, `"` or a
 * line break, `""` for a quote inside), each with the line it starts on. `unclosed` is the line of a
 * quoted field that never ends.
 */
export function csvRecords(text: string): { records: { line: number; fields: string[] }[]; unclosed: number | null } {
  const source = stripBom(text)
  const records: { line: number; fields: string[] }[] = []
  let fields: string[] = []
  let field = ''
  let quoted = false
  let quoteLine = 0
  let line = 1
  let recordLine = 1
  const endRecord = () => {
    fields.push(field)
    records.push({ line: recordLine, fields })
    fields = []
    field = ''
  }
  for (let i = 0; i < source.length; i++) {
    const char = source[i]
    if (quoted) {
      if (char === '"' && source[i + 1] === '"') {
        field += '"'
        i += 1
      } else if (char === '"') quoted = false
      else {
        if (char === '\n' || (char === '\r' && source[i + 1] !== '\n')) line += 1
        field += char
      }
      continue
    }
    if (char === '"' && field.trim() === '') {
      quoted = true
      quoteLine = line
      field = ''
    } else if (char === ',') {
      fields.push(field)
      field = ''
    } else if (char === '\n' || char === '\r') {
      if (char === '\r' && source[i + 1] === '\n') i += 1
      endRecord()
      line += 1
      recordLine = line
    } else field += char
  }
  if (quoted) return { records, unclosed: quoteLine }
  if (field !== '' || fields.length > 0) endRecord()
  return { records, unclosed: null }
}

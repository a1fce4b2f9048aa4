// The event types of the WebSocket protocol, as totem/events.py declares them.
export const EVENTS = Object.freeze({
  SESSION_STATUS: 'session.status',
  SESSION_UPDATED: 'session.updated',
  MESSAGE_CREATED: 'message.created',
  PART_CREATED: 'part.created',
  PART_DELTA: 'part.delta',
  PART_UPDATED: 'part.updated',
  PART_CLOSED: 'part.closed',
  PERMISSION_ASK: 'permission.ask',
  PERMISSION_REPLIED: 'permission.replied',
  QUESTION_ASK: 'question.ask',
  TODO_UPDATED: 'todo.updated',
  TERMINAL_OUTPUT: 'terminal.output',
  TERMINAL_EXIT: 'terminal.exit',
  DIFF_UPDATED: 'diff.updated',
  QUESTION_REPLIED: 'question.replied',
  ERROR: 'error',
});

export const CLIENT = Object.freeze({
  SUBSCRIBE: 'subscribe',
  UNSUBSCRIBE: 'unsubscribe',
});

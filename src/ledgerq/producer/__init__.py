"""The producer side: ``Client`` (validate, enqueue, look jobs up), batches of jobs with
callbacks (``batch_builder``) and workflows of steps (``workflow_api``)."""

"""A small Celery project run by tests/test_celery.py in real `celery worker` processes."""
